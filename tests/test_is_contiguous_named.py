"""``x.is_contiguous()`` on a named value answers for each instance's positional view, as
``x.stride()`` does and as the loop over the named indices (and ``torch.func.vmap``)
gives.  It used to answer for the physical tensor, named dims leading: False for a named
slice ``x[:, :3]`` whose instances are contiguous, and False for
``is_contiguous(memory_format=torch.channels_last)`` after ``contiguous(memory_format=...)``.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

CL = torch.channels_last


@pytest.mark.parametrize("t", [
    torch.zeros(2, 5)[:, :3], torch.zeros(3, 2).T, torch.zeros(2, 3), torch.zeros(2, 3)[:, ::2],
    torch.zeros(2, 1, 3, 2, 2), torch.zeros(2, 1, 3, 2, 2).permute(0, 1, 3, 4, 2).contiguous()
    .permute(0, 1, 4, 2, 3)], ids=["slice", "transposed", "plain", "strided", "nchw", "nhwc"])
def test_is_contiguous_answers_for_each_instance(t):
    x = nx.named(t, 'N ...')
    assert x.is_contiguous() == t[0].is_contiguous() == t[1].is_contiguous()
    assert x.is_contiguous() == bool(torch.func.vmap(lambda a: torch.tensor(a.is_contiguous()))(t)[0])
    if t.dim() == 5:
        assert x.is_contiguous(memory_format=CL) == t[0].is_contiguous(memory_format=CL)


def test_contiguous_then_is_contiguous_in_that_format():
    x = nx.named(torch.randn(2, 3, 2, 2, 4), 'N ...')
    assert x.contiguous(memory_format=CL).is_contiguous(memory_format=CL)
    assert not x.contiguous(memory_format=CL).is_contiguous()
    assert nx.named(torch.zeros(0, 3), 'N ...').is_contiguous()
