"""A program loaded from nx.jit's program store follows the modules it calls as a
traced one does: after ``eval()`` (or a replaced weight) the call is identified and
compiled anew, never served by the loaded program of the old state."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes.transforms import _store

pytestmark = pytest.mark.skipif(not _store.available(), reason="torch without AOTInductor")


class _Doubles(torch.nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x


@pytest.fixture
def store(tmp_path):
    before = nx.set_program_store(tmp_path)
    try:
        yield tmp_path
    finally:
        _store.flush()
        nx.set_program_store(before)


@pytest.mark.slow
def test_loaded_program_sees_eval_and_replaced_weights(store):
    m, lin = _Doubles(), torch.nn.Linear(2, 2).requires_grad_(False)
    fun = lambda x: lin(m(x))  # noqa: E731
    x = torch.ones(1, 2)
    nx.jit(fun)(x)
    _store.flush()
    again = nx.jit(fun)   # a new jit: its first program comes from the store
    torch.testing.assert_close(again(x), fun(x))
    assert again.stats()["store_loaded"] == 1
    m.eval()
    torch.testing.assert_close(again(x), fun(x))
    lin.weight = torch.nn.Parameter(torch.zeros(2, 2), requires_grad=False)
    torch.testing.assert_close(again(x), fun(x))
