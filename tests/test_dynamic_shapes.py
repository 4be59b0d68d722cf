"""Ops whose result shape depends on the values (issue 11, item 3).

On a named value such an op runs once per index of the named axes (SPEC §1).  When
every instance's result has the same shape the stacked result is exact (reference: the
plain loop over the named index); when the shapes differ no named value can hold them
(one name, one size; one positional shape per value), and a ShapeError says why.
Before: one-argument ``torch.where(x)`` ran on the physical tensor and labelled its
index tensors with the named axis at the wrong size ({'b': 3} for a 'b' of size 2).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import named_axes as nx
from named_axes._dispatch import ShapeError

EQUAL = torch.tensor([[1., 0., 2.], [0., 4., 3.]])     # two nonzeros in each row
UNEQUAL = torch.tensor([[1., 0., 2.], [0., 0., 3.]])   # two, then one

OPS = {
    "where": lambda v: torch.where(v),
    "where_kw": lambda v: torch.where(condition=v),
    "nonzero": lambda v: torch.nonzero(v),
    "nonzero_tuple": lambda v: torch.nonzero(v, as_tuple=True),
    "Tensor.nonzero": lambda v: v.nonzero(),
    "argwhere": lambda v: torch.argwhere(v),
    "masked_select": lambda v: torch.masked_select(v, v > 0),
    "Tensor.masked_select": lambda v: v.masked_select(v != 0),
    "bool_mask_index": lambda v: v[v != 0],
    "unique": lambda v: torch.unique(v),
    "unique_counts": lambda v: torch.unique(v, return_counts=True),
    "Tensor.unique": lambda v: v.unique(),
    "unique_consecutive": lambda v: torch.unique_consecutive(v),
    "bincount": lambda v: torch.bincount((v != 0).long().sum(0, keepdim=True)),
    "repeat_interleave": lambda v: torch.repeat_interleave((v != 0).long()),
    "repeat_interleave_tensor": lambda v: torch.repeat_interleave(v, (v != 0).long()),
}


def _loop(fn, full):
    """Reference: ``fn`` per row, stacked (a tuple of results stacked entry by entry)."""
    outs = [fn(row) for row in full]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack([o[j] for o in outs]) for j in range(len(outs[0])))
    return torch.stack(outs)


def _positional(out):
    if isinstance(out, tuple):
        return tuple(_positional(o) for o in out)
    assert out.named_shape == {"b": 2}, out.named_shape   # one name, one size
    return nx.positional(out, {0: "b"})


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # functorch's "performance drop"
        yield


@pytest.mark.parametrize("op", list(OPS))
def test_equal_lengths_are_exact(op):
    fn = OPS[op]
    ref = _loop(fn, EQUAL)
    out = _positional(fn(nx.named(EQUAL.clone(), {0: "b"})))
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == len(ref)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)
    else:
        assert torch.equal(out, ref)


def test_where_one_argument_indices():
    # the loop reference, spelled out: row 0 [1, 0, 2] -> (0, 2); row 1 [0, 4, 3] -> (1, 2)
    (idx,) = torch.where(nx.named(EQUAL, {0: "b"}))
    assert idx.named_shape == {"b": 2}
    assert torch.equal(nx.positional(idx, {0: "b"}), torch.tensor([[0, 2], [1, 2]]))


@pytest.mark.parametrize("op", [o for o in OPS if not o.startswith("repeat_interleave")
                                and o != "bincount"])
def test_unequal_lengths_raise(op):
    x = nx.named(UNEQUAL.clone(), {0: "b"})
    with pytest.raises(ShapeError, match=r"depends on the values and differs between instances "
                                         r"of the named axes \{'b': 2\}: .* at \['b'=0\] but "
                                         r".* at \['b'=1\]; a named value has one positional shape"):
        OPS[op](x)


def test_unequal_bincount_and_repeat_interleave_raise():
    x = nx.named(UNEQUAL.clone(), {0: "b"})
    with pytest.raises(ShapeError, match=r"torch.bincount: the shape of its result depends on the "
                                         r"values .* \(3,\) at \['b'=0\] but \(2,\) at \['b'=1\]"):
        OPS["bincount"](x)
    with pytest.raises(ShapeError, match=r"torch.repeat_interleave: the shape of its result "
                                         r"depends on the values .* \(2,\) at \['b'=0\] but \(1,\)"):
        OPS["repeat_interleave"](x)


def test_shape_error_is_a_value_error_and_names_the_op_inside_xmap():
    f = nx.xmap(lambda v: torch.nonzero(v), in_axes=["b", ...], out_axes=["b", ...])
    with pytest.raises(ValueError, match=r"torch.nonzero: the shape of its result"):
        f(UNEQUAL)
    assert torch.equal(f(EQUAL), _loop(torch.nonzero, EQUAL))


def test_unnamed_mask_or_fixed_size_ops_stay_vectorized():
    # the same mask for every instance: every result has one length
    x = nx.named(UNEQUAL, {0: "b"})
    mask = torch.tensor([True, False, True])
    assert torch.equal(nx.positional(x[mask], {0: "b"}), UNEQUAL[:, mask])
    out = torch.masked_select(x, mask)
    assert torch.equal(nx.positional(out, {0: "b"}), UNEQUAL[:, mask])
    # fixed-size forms never depend on the values' pattern
    out = torch.nonzero_static(x, size=3)
    assert torch.equal(nx.positional(out, {0: "b"}),
                       torch.stack([torch.nonzero_static(r, size=3) for r in UNEQUAL]))
    out = torch.histc(x, bins=3)
    assert torch.equal(nx.positional(out, {0: "b"}),
                       torch.stack([torch.histc(r, bins=3) for r in UNEQUAL]))
    # three-argument where is pointwise
    out = torch.where(x > 0, x, -1.0)
    assert torch.equal(nx.positional(out, {0: "b"}), torch.where(UNEQUAL > 0, UNEQUAL, -1.0))
