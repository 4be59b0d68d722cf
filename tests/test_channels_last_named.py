"""A channels-last ``memory_format`` on a named value: ``clone``, ``contiguous``, ``to``,
the conversions and the ``*_like`` factories lay out each instance channels-last, as the
loop over the named indices does.  They used to pass the format to torch on the physical
tensor (named dims leading), whose rank is not 4 (5): "required rank 4 tensor to use
channels_last format" for a value whose positional rank is 4.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

CL, CL3 = torch.channels_last, torch.channels_last_3d

OPS = {
    "clone": lambda x, f: x.clone(memory_format=f),
    "torch.clone": lambda x, f: torch.clone(x, memory_format=f),
    "contiguous": lambda x, f: x.contiguous(memory_format=f),
    "to": lambda x, f: x.to(memory_format=f),
    "to dtype": lambda x, f: x.to(torch.float64, memory_format=f),
    "double": lambda x, f: x.double(memory_format=f),
    "zeros_like": lambda x, f: torch.zeros_like(x, memory_format=f),
    "full_like": lambda x, f: torch.full_like(x, 2.0, memory_format=f),
}


@pytest.mark.parametrize("fmt, shape", [(CL, (2, 3, 2, 2, 5)), (CL3, (2, 3, 2, 2, 5, 2))],
                         ids=["channels_last", "channels_last_3d"])
@pytest.mark.parametrize("op", list(OPS))
def test_channels_last_on_named_values_matches_the_loop(op, fmt, shape):
    x = torch.randn(shape)
    got = OPS[op](nx.named(x, 'N ...'), fmt)
    want = [OPS[op](row, fmt) for row in x]
    assert got.named_shape == {'N': 2} and got.dtype == want[0].dtype
    assert torch.equal(nx.positional(got, 'N ...'), torch.stack(want))
    assert got.stride() == want[0].stride()   # each instance laid out channels-last


def test_channels_last_on_the_wrong_positional_rank_is_torchs_error():
    x = nx.named(torch.randn(2, 3, 2, 2), 'N ...')    # positional rank 3
    with pytest.raises(nx.ShapeError, match="required rank 4 tensor to use channels_last"):
        x.clone(memory_format=CL)
    with pytest.raises(nx.ShapeError, match="required rank 4 tensor to use channels_last"):
        x.to(memory_format=CL)
