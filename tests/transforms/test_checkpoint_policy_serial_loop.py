"""nx.checkpoint with a selective-checkpoint policy around a collective over a SerialLoop
axis: the gradients equal the unsplit run's.  The loop's earlier passes stop each chunk at
the collective, and their partial graphs reach the final result through the combined
value; their recomputation used to run past that point, which torch's selective
checkpointing refuses ("aten.mul.Tensor encountered during backward but not found in
storage").  A recomputation now stops where its forward paused."""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy

import named_axes as nx
from named_axes import lax


def _save_matmuls(ctx, op, *args, **kwargs):
    return (CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default
            else CheckpointPolicy.PREFER_RECOMPUTE)


def _save_all(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE


BODIES = {
    "psum": lambda x, w: (lax.psum(torch.tanh(x @ w), 'a') * x).sum(),
    "pmax_then_pmean": lambda x, w: (lax.pmean(lax.pmax(x @ w, 'a').sin() * x, 'a')
                                     * x.cos()).sum(),
    "psum_tree": lambda x, w: sum(v.sum() for v in lax.psum({"p": x @ w, "q": x.exp()},
                                                             'a').values()) * x.sum(),
}


def _grads(body, resources):
    x = torch.randn(4, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x.requires_grad_(True), w.requires_grad_(True)
    f = nx.xmap(body, in_axes=(['a', ...], [...]), out_axes=['a', ...],
                axis_resources=resources)
    out = f(x, w)
    (out * torch.arange(1., 5.)).sum().backward()
    return out.detach(), x.grad, w.grad


@pytest.mark.parametrize("policy", [None, _save_matmuls, _save_all])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_checkpoint_policy_with_a_serial_loop_collective(name, policy):
    want = _grads(BODIES[name], {})
    for chunks in (2, 4):
        got = _grads(nx.checkpoint(BODIES[name], policy=policy), {'a': nx.SerialLoop(chunks)})
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
