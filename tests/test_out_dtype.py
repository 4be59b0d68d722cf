"""``out=`` of another dtype than the op's result: each instance gets torch's own out= call.

torch computes some ops in their out's dtype (the reductions ``sum``, ``nansum``, ``mean``,
``prod``, ``cumsum``, ``cumprod``, ``logsumexp``: the input cast first), casts others'
results (elementwise ops), and refuses the rest (``softmax``, ``abs`` of an int into a
float, ``amax``, ``dot``...).  The named call used to cast the result computed in the
input's dtype: float32 sums into a float64 out lost the precision torch's sum keeps, a
float sum into an int64 out was refused though torch casts first, and the ops torch
refuses wrote a value.  Reference: torch's out= call once per named index.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.tensor([16777216., 1., 1., 1.])          # float32 sums lose the ones
XS = torch.stack([X, X / 3])


def _loop(op, x, dtype, shape):
    outs = []
    for row in x:
        o = torch.empty(shape, dtype=dtype)
        op(row, o)
        outs.append(o)
    return torch.stack(outs)


@pytest.mark.parametrize("op, dtype, shape", [
    (lambda x, o: torch.sum(x, 0, out=o), torch.float64, ()),
    (lambda x, o: torch.nansum(x, 0, out=o), torch.float64, ()),
    (lambda x, o: torch.mean(x, 0, out=o), torch.float64, ()),
    (lambda x, o: torch.prod(x + 1e-3, 0, out=o), torch.float64, ()),
    (lambda x, o: torch.cumsum(x, 0, out=o), torch.float64, (4,)),
    (lambda x, o: torch.cumprod(x / 3, 0, out=o), torch.float64, (4,)),
    (lambda x, o: torch.logsumexp(x / 1e6, 0, out=o), torch.float64, ()),
    (lambda x, o: torch.add(x, 1e-3, out=o), torch.float64, (4,)),
    (lambda x, o: torch.sum(x / 1e7, 0, out=o), torch.int64, ()),
    (lambda x, o: torch.cumsum(x / 1e7, 0, out=o), torch.int64, (4,)),
    (lambda x, o: torch.amax(x, 0, out=o), torch.float32, ()),   # same dtype: unchanged
], ids=["sum", "nansum", "mean", "prod", "cumsum", "cumprod", "logsumexp", "add",
        "sum-int", "cumsum-int", "amax"])
def test_out_of_another_dtype_equals_torchs_out_per_instance(op, dtype, shape):
    want = _loop(op, XS, dtype, shape)
    out = nx.named(torch.empty((2, *shape), dtype=dtype), 'N ...')
    assert op(nx.named(XS.clone(), 'N ...'), out) is out
    got = nx.positional(out, 'N ...')
    assert got.dtype == dtype and out.named_shape == {'N': 2}
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("op, dtype", [
    (lambda x, o: torch.softmax(x, 0, out=o), torch.float64),
    (lambda x, o: torch.amax(x, 0, out=o), torch.float64),
    (lambda x, o: torch.dot(x, x, out=o), torch.float64),
    (lambda x, o: torch.round(x, out=o), torch.float64),
    (lambda x, o: torch.argmax(x, 0, out=o), torch.int32),
    (lambda x, o: torch.abs(x.long(), out=o), torch.float32),
])
def test_out_dtype_torch_refuses_is_refused(op, dtype):
    with pytest.raises(RuntimeError):
        op(X, torch.empty(0, dtype=dtype))
    out = nx.named(torch.zeros(2, 0, dtype=dtype), 'N ...')
    with pytest.raises(nx.AxisSizeError, match="out="):
        op(nx.named(XS, 'N ...'), out)
    assert out.shape == (0,)


def test_out_dtype_tuple_out():
    values = nx.named(torch.empty(2, dtype=torch.float64), 'N')
    indices = nx.named(torch.empty(2, dtype=torch.long), 'N')
    with pytest.raises(nx.AxisSizeError, match="out="):   # torch: values must match
        torch.max(nx.named(XS, 'N ...'), 0, out=(values, indices))
