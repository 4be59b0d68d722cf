"""Regressions found in the lean-core round r3."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("pos_contract, pos_batch", [
    (((0, 0), (0, 1)), ((), ())),    # x's dim 0 contracted twice
    (((0,), (0,)), ((0,), (1,))),    # x's dim 0 both contracted and batched
])
def test_pdot_rejects_a_dim_paired_twice(pos_contract, pos_batch):
    # was a silently wrong answer (the second pairing overwrote the first)
    x, y = torch.randn(3, 4), torch.randn(3, 3)
    with pytest.raises(nx.AxisSpecError, match=r"pdot: pos_contract \+ pos_batch \(x\)="
                                               r".* names one positional dim twice"):
        nx.lax.pdot(x, y, (), pos_contract=pos_contract, pos_batch=pos_batch)


@pytest.mark.parametrize("dim", [None, True, ...])
def test_one_hot_refuses_what_is_no_axis_name(dim):
    # was a NamedTensor with an axis named None / True / Ellipsis (nx.named refuses them)
    with pytest.raises(nx.AxisTypeError, match="one_hot: dim"):
        nx.one_hot(torch.tensor([0, 2]), 3, dim=dim)


def test_one_hot_unhashable_dim():
    with pytest.raises(nx.AxisTypeError, match=r"one_hot: dim: axis name \[1\] is not hashable"):
        nx.one_hot(torch.tensor([0, 2]), 3, dim=[1])
