"""Type promotion of a named value with no positional dims (the elementwise ops, ``where``,
``clamp``, ``addcmul``...): to each instance it is a
zero-dim tensor, which yields to a dimensioned operand of its category and ranks with a
zero-dim one (torch's rule), but its physical tensor has the named dims.  The elementwise
kernel used to promote it as a dimensioned tensor: inside xmap, a per-instance scalar
``x.sum()`` (float32) times a bfloat16 activation gave float32 (each instance: bfloat16),
and times a float64 zero-dim tensor gave float32 (each instance: float64).
Reference: the op once per named index.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

F64, BF16 = torch.float64, torch.bfloat16
X = torch.randn(2, 3)


def _loop(f, x, other, named_other):
    return torch.stack([f(x[i], other[i] if named_other else other) for i in range(2)])


@pytest.mark.parametrize("f, other, named_other", [
    (lambda x, p: x.double().sum() + p, torch.ones(3), False),
    (lambda x, p: p + x.double().sum(), torch.ones(3), False),
    (lambda x, p: p * x.sum(), torch.tensor(3.0, dtype=F64), False),
    (lambda x, p: x.sum() * p, torch.tensor(1 / 3, dtype=F64), False),
    (lambda x, p: x.sum() * p, torch.randn(3).to(BF16), False),
    (lambda x, y: x * y.sum(), torch.randn(2, 3, dtype=F64), True),
    (lambda x, y: y.sum() * x, torch.randn(2, 3, dtype=F64), True),
    (lambda x, y: x.add_(y.sum()), torch.randn(2, 3, dtype=F64), True),
    (lambda x, p: x.double().sum() == p, torch.ones(3), False),
    (lambda x, p: torch.where(p > 0, x.double().sum(), p), torch.randn(3), False),
    (lambda x, p: torch.where(x.sum() > 0, x.sum(), p), torch.tensor(2.0, dtype=F64), False),
    (lambda x, p: torch.clamp(x.double().sum(), min=p), torch.randn(3), False),
    (lambda x, p: torch.addcmul(x.double().sum(), p, p), torch.randn(3), False),
], ids=["f64+f32vec", "f32vec+f64", "f64scalar*f32", "f32*f64scalar", "f32*bf16vec",
        "named-vec*named-scalar", "named-scalar*named-vec", "inplace", "eq", "where-vec",
        "where-scalars", "clamp", "addcmul"])
def test_a_named_value_without_positional_dims_promotes_as_a_zero_dim_tensor(f, other,
                                                                              named_other):
    want = _loop(f, X.clone(), other, named_other)
    got = nx.xmap(f, in_axes=(['N', ...], ['N', ...] if named_other else [...]),
                  out_axes=['N', ...])(X.clone(), other)
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


def test_different_names_promote_as_per_instance():
    x = nx.named(torch.randn(2, 3), 'N ...')
    y = nx.named(torch.randn(4, 3, dtype=F64), 'M ...')
    assert (x.sum() * y).dtype == F64 and (x.double().sum() * y.float()).dtype == torch.float32
    want = x.double().sum().to(torch.float32)
    assert torch.equal(nx.positional(x.double().sum() * y.float(), 'N M ...'),
                       nx.positional(want * y.float(), 'N M ...'))
