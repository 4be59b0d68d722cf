"""The first call of an op that runs per instance (the dispatcher's fallback) inside
nx.checkpoint: the fallback's one-time check of torch's complaints on a copy of the first
instance saves no tensors the checkpoint counts.  Was: torch's CheckpointError 'A
different number of tensors was saved during the original forward and recomputation' on
the first call (the check runs once per signature: the recomputation skipped it)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

OPS = {
    "polar": lambda r: torch.polar(r, r).abs(),
    "cdist": lambda r: torch.cdist(r.reshape(3, 4), r.reshape(3, 4)),
    "pdist": lambda r: F.pdist(r.reshape(3, 4)),
    "renorm": lambda r: torch.renorm(r[None], 2, 0, 1.0),
}


@pytest.mark.filterwarnings("ignore:There is a performance drop")
@pytest.mark.parametrize("name", list(OPS))
def test_first_call_gradient_equals_the_unchecked_one(name):
    nx.clear_caches()
    op = OPS[name]
    x = torch.rand(2, 12, dtype=torch.float64)

    def grad(fn):
        xr = x.clone().requires_grad_()
        f = nx.xmap(lambda r: fn(lambda v: op(v).sum())(r), in_axes=["i", ...],
                    out_axes=["i", ...])
        return torch.autograd.grad(f(xr).sum(), xr)[0]
    torch.testing.assert_close(grad(nx.checkpoint), grad(lambda g: g))
