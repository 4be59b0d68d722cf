"""``out=`` that overlaps an input within one instance is refused, as torch refuses each
instance's call (``torch.cumsum(x[:4], 0, out=x[1:])``: "some elements of the input tensor
and the written-to tensor refer to a single memory location").  The named call used to
compute the result first and copy it in, writing a value where the loop over the named
indices raises.  An out= that is the input itself (full overlap) stays allowed.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

BASE = torch.arange(10.).reshape(2, 5)


def test_partial_overlap_of_out_and_input_refuses_as_torch_does():
    with pytest.raises(RuntimeError, match="single memory location"):
        b = BASE[0].clone()
        torch.cumsum(b[:4], 0, out=b[1:])
    x = nx.named(BASE.clone(), 'N ...')
    with pytest.raises(nx.AxisSizeError, match="share memory that overlaps within one "
                                               "instance.*single memory location"):
        torch.cumsum(x[:4], 0, out=x[1:])
    assert torch.equal(nx.positional(x, 'N ...'), BASE)   # left as it was
    with pytest.raises(nx.AxisSizeError, match="single memory location"):
        torch.mul(x[1:], 2, out=x[:4])


def test_out_that_is_the_input_itself_is_allowed():
    x = nx.named(BASE.clone(), 'N ...')
    assert torch.add(x, 1, out=x) is x
    assert torch.equal(nx.positional(x, 'N ...'), BASE + 1)
    a = nx.named(BASE.clone(), 'a b')
    o = nx.named(a._data.T, 'b a')     # the same memory, the other layout
    torch.mul(a, 2, out=o)
    assert torch.equal(nx.positional(a, 'a b'), BASE * 2)
