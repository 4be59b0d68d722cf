"""An in-place op whose target is passed by keyword (torch.nn.init's functions hand it on
as ``tensor=``) runs on named values by the dispatcher's fallback and returns the target.
Was: ShapeError 'tuple index out of range' (the fallback read the target as args[0])."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

INIT = {
    "uniform_": lambda t: torch.nn.init.uniform_(t, -1.0, 1.0),
    "normal_": lambda t: torch.nn.init.normal_(t),
    "constant_": lambda t: torch.nn.init.constant_(t, 3.0),
    "zeros_": lambda t: torch.nn.init.zeros_(t),
}


@pytest.mark.parametrize("name", list(INIT))
def test_nn_init_on_a_named_value_writes_it_and_returns_it(name):
    data = torch.full((4, 3), 7.0)
    x = nx.named(data.clone(), {0: "i"})
    torch.manual_seed(0)
    out = INIT[name](x)
    assert out is x
    got = nx.positional(x, {0: "i"})
    if name in ("constant_", "zeros_"):
        torch.testing.assert_close(got, INIT[name](data.clone()))
    else:   # per instance of 'i', its own draws (the fallback's randomness='different')
        assert not torch.equal(got, data) and not torch.equal(got[0], got[1])


def test_nn_init_in_nx_vmap_draws_as_torch_func_vmap():
    f = lambda r: torch.nn.init.uniform_(r.clone())   # noqa: E731
    x = torch.rand(4, 3)
    for mode in ("different", "same"):
        torch.manual_seed(0)
        want = torch.func.vmap(f, randomness=mode)(x)
        torch.manual_seed(0)
        got = nx.vmap(f, randomness=mode, axis_name="i")(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
