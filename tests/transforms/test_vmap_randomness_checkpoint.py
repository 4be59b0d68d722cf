"""A checkpoint's recomputation inside nx.vmap draws as the forward did, per nx.vmap's
``randomness``: the frames it re-enters bring the randomness handler back
(``_env.within``).  Was: the recomputation drew without it -- torch's CheckpointError
(a draw of another shape) for a plain draw under 'different' or a rule's draw under
'same'."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

BODIES = {
    "plain randn": lambda r: (r * torch.randn(50)).sum(),
    "rand_like": lambda r: (torch.rand_like(r) * r).sum(),
    "dropout and draws": lambda r: (F.dropout(r) * torch.randn(50) * torch.rand(())).sum(),
}


@pytest.mark.parametrize("mode", ["different", "same"])
@pytest.mark.parametrize("name", list(BODIES))
def test_checkpointed_body_gradient_equals_torch_func_vmap(name, mode):
    x = torch.rand(4, 50)
    body = BODIES[name]

    def grads(vmapped):
        xr = x.clone().requires_grad_()
        torch.manual_seed(0)
        out = vmapped(xr)
        return out, torch.autograd.grad(out.sum(), xr)[0]
    got = grads(nx.vmap(nx.checkpoint(body), randomness=mode, axis_name="i"))
    want = grads(torch.func.vmap(body, randomness=mode))
    torch.testing.assert_close(got, want)
