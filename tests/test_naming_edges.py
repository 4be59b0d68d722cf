"""Edges of the naming API (named_axes/_naming.py): flatten/unflatten by name on a
value with an empty axis, and indexing a named axis with a boolean mask."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_flatten_by_name_with_an_empty_axis_beside():
    # the reshape used -1 for the merged axis, ambiguous when another axis is empty
    x = nx.named(torch.zeros(2, 3, 0), "c h b")
    y = x.flatten(["c", "h"], "f")
    assert y.named_shape == {"f": 6, "b": 0}
    z = nx.named(torch.zeros(2, 3, 0), "c h ...").flatten(["c", "h"], "f")
    assert z.named_shape == {"f": 6} and z.shape == (0,)


@pytest.mark.parametrize("spec", ["f b", "f ..."])
def test_unflatten_by_name_with_minus_one_and_an_empty_axis_beside(spec):
    x = nx.named(torch.zeros(4, 0), spec)
    y = x.unflatten("f", {"c": -1, "h": 2})
    assert y.named_shape["c"] == 2 and y.named_shape["h"] == 2


def test_unflatten_by_name_matches_positional_unflatten():
    t = torch.arange(24.).reshape(4, 6)
    y = nx.named(t, "f ...").unflatten("f", (("c", -1), ("h", 2)))
    assert torch.equal(nx.positional(y, "c h"), t.unflatten(0, (2, 2)))


@pytest.mark.parametrize("mask", [[True, False, True], torch.tensor([True, False, True])])
def test_boolean_mask_on_a_named_axis_is_refused_clearly(mask):
    # a mask would make the axis size depend on values: refused with a NamedAxisError
    x = nx.named(torch.arange(3.), "b")
    with pytest.raises(nx.AxisTypeError, match="1-D integer index"):
        x[{"b": mask}]


def test_integer_index_of_any_int_dtype_selects():
    x = nx.named(torch.arange(6.).reshape(3, 2), "b ...")
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        got = x[{"b": torch.tensor([2, 0], dtype=dtype)}]
        assert torch.equal(nx.positional(got, "b"), torch.tensor([[4., 5.], [0., 1.]]))


def test_unflatten_by_name_refuses_a_fractional_size():
    # int() used to truncate 2.5 to 2: a split the caller did not ask for, silently
    x = nx.named(torch.arange(4.), "f")
    with pytest.raises(nx.AxisTypeError, match="sizes are ints"):
        x.unflatten("f", {"c": 2.5, "h": 2})
    assert x.unflatten("f", {"c": torch.tensor(2), "h": 2}).named_shape == {"c": 2, "h": 2}


def test_unflatten_by_name_refuses_a_negative_size_clearly():
    x = nx.named(torch.arange(4.), "f")
    with pytest.raises(nx.AxisSizeError, match="cannot be split"):
        x.unflatten("f", {"c": -1, "h": -2})


def test_one_positional_dim_indexed_twice_is_refused():
    # {0: 1, -2: 0} on two positional dims: the second key silently won
    x = nx.named(torch.arange(12.).reshape(2, 3, 2), "b ...")
    with pytest.raises(nx.AxisSpecError, match="indexed twice"):
        x[{0: 1, -2: 0}]
    assert torch.equal(nx.positional(x[{0: 1, -1: 0}], "b"), torch.tensor([2., 8.]))


def test_index_tensor_on_a_named_axis_counts_negative_indices_from_the_end():
    # x[{'b': -1}] worked while x[{'b': [-1]}] raised index_select's raw IndexError
    t = torch.arange(6.).reshape(2, 3)
    x = nx.named(t, "b ...")
    for idx in ([-1, 0], torch.tensor([-1, 0])):
        assert torch.equal(nx.positional(x[{"b": idx}], "b"), t[[-1, 0]])
    with pytest.raises(nx.AxisSizeError, match="axis 'b' of size 2"):
        x[{"b": [5]}]


def test_a_0d_numpy_integer_and_an_empty_list_index_a_named_axis():
    import numpy as np
    x = nx.named(torch.arange(6.).reshape(2, 3), "b ...")
    assert torch.equal(x[{"b": np.array(1)}], torch.tensor([3., 4., 5.]))   # as an int
    empty = x[{"b": []}]   # as torch's t[[]]: nothing selected
    assert empty.named_shape == {"b": 0} and empty.shape == (3,)
    with pytest.raises(nx.AxisTypeError, match="axis 'b' takes an int"):
        x[{"b": np.array(1.0)}]
