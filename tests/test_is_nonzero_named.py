"""``torch.is_nonzero`` of a named value is refused as ``bool()`` is, whatever the sizes of
its named axes: it used to answer for the physical tensor, a Python bool for named shape
``{'N': 1}`` (where ``bool()`` refuses) and a ShapeError about "more than one value" for
``{'N': 2}``.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("call", [torch.is_nonzero, lambda x: x.is_nonzero(), bool],
                         ids=["torch", "method", "bool"])
def test_is_nonzero_of_a_named_value_is_ambiguous(call, n):
    with pytest.raises(nx.AxisTypeError, match="is ambiguous"):
        call(nx.named(torch.ones(n), 'N'))


def test_is_nonzero_of_a_value_without_names():
    assert torch.is_nonzero(nx.positional(nx.named(torch.ones(1), 'N'), 'N'))
