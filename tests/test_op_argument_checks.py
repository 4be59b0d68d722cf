"""Op arguments that used to pass silently: a positional dim paired twice in pdot, a one_hot
dim that is no axis name, a view to a dtype that changes a named axis's size."""
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


def test_view_as_a_dtype_of_another_size_keeps_named_sizes():
    # was {'a': 2, 'b': 12}: the last named axis took the new element size
    x = nx.named(torch.ones(2, 3), "a b")
    with pytest.raises(nx.ShapeError, match="cannot be 0 to view"):
        x.view(torch.int8)
    y = x.view(torch.int32)   # one element size: per instance as torch does
    assert y.named_shape == {"a": 2, "b": 3} and y.dtype == torch.int32
