"""Random ops on a mesh draw what the vectorized run draws: a random op on a value split
over the mesh is each rank's part of the unsplit run's draws (every rank drew the same
values for its own shard, so instances on different ranks got equal noise -- dropout
masks repeated across the shards), alone and with a SerialLoop.  Run on 4 gloo ranks:
this file is also the worker script (``__main__``).
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _ranks import launch, run_rank  # noqa: E402

import named_axes as nx  # noqa: E402

L = nx.lax
X = torch.arange(8 * 6 * 3, dtype=torch.float64).reshape(8, 6, 3) / 100

_PROGRAMS = {
    "plain randn": lambda x: x * 0 + torch.randn(3, dtype=torch.float64),
    "randn_like": lambda x: torch.randn_like(x),
    "dropout": lambda x: F.dropout(x + 1, 0.5),
    "dropout along j": lambda x: F.dropout(x.sum("i") + 1, 0.5) * x,
    "pmax of a plain draw": lambda x: L.pmax(x * 0 + torch.rand(3, dtype=torch.float64), "i")
    + torch.rand_like(x),
    "bernoulli": lambda x: torch.bernoulli(x.clamp(max=1)),
    # a layout in memory other than the logical one (the draws fill memory in order)
    "dropout of a transpose": lambda x: F.dropout((x[:, None] * x).T, 0.5).sum(0),
    # an op not named a random op that draws (a kernel's own dropout)
    "sdpa with dropout": lambda x: F.scaled_dot_product_attention(
        x[:, None], x[:, None], x[:, None], dropout_p=0.5),
}
_MESHES = {   # name: (mesh shape, mesh axis names, axis_resources)
    "4": ((4,), ("x",), {"i": "x"}),
    "2x2, i and j": ((2, 2), ("x", "y"), {"i": "x", "j": "y"}),
    "2x2, i on both": ((2, 2), ("x", "y"), {"i": ("x", "y")}),
    "2x2 and a SerialLoop": ((2, 2), ("x", "y"), {"i": "y", "j": nx.SerialLoop(3)}),
}


def _run(fn, resources):
    """The value, the gradient taken after the call, and the random state after it."""
    import numpy as np
    from named_axes import parallel as P

    torch.manual_seed(7)
    x = X.clone().requires_grad_()
    f = nx.xmap(fn, in_axes=["i", "j", ...], out_axes=["i", "j", ...],
                axis_resources=resources[2] if resources else {})
    if resources:
        with P.Mesh(np.array(P.devices()).reshape(resources[0]), resources[1]):
            out = f(x)
    else:
        out = f(x)
    grad, = torch.autograd.grad((out * out).sum(), x) if out.requires_grad else (x * 0,)
    return out.detach(), grad, torch.rand(())


def _scenario(rank, results):
    errors = {}
    for name, fn in _PROGRAMS.items():
        want = _run(fn, None)
        for mesh, resources in _MESHES.items():
            got = _run(fn, resources)
            errors[f"{name}, {mesh}"] = [float((a - b).abs().max()) for a, b in zip(got, want)]
    results["errors"] = errors


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_random_ops_on_a_mesh_draw_the_vectorized_values(tmp_path):
    for rank in launch(os.path.abspath(__file__), 4, tmp_path, timeout=300):
        bad = {k: v for k, v in rank["errors"].items() if max(v) > 1e-12}
        assert not bad, bad


if __name__ == "__main__":
    run_rank([_scenario])
