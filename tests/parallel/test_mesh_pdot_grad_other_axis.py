"""nx.grad inside the xmap through ``nx.lax.pdot`` with a named axis on a mesh: the
gradient equals the vectorized run's whether the mesh splits the contracted axis or
another one.  With the mesh on ``'j'`` and the contraction over ``'i'`` (or over both),
the engine's chunk-local product and the engine path around it both applied JAX's
transpose scaling (a gradient ``1/|i|`` of the true one).  Run on 4 gloo ranks: this
file is also the worker script (``__main__``)."""
from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _ranks import launch, run_rank  # noqa: E402

import named_axes as nx  # noqa: E402

L = nx.lax
_FS = {
    "over_i": lambda x: nx.grad(lambda x: torch.sin(L.pdot(x, x, "i")).sum())(x),
    "over_j": lambda x: nx.grad(lambda x: torch.sin(L.pdot(x, x, "j")).sum())(x),
    "over_ij": lambda x: nx.grad(lambda x: torch.sin(L.pdot(x, 2 * x, ("i", "j"))).sum())(x),
}


def _scenario(rank, results):
    import numpy as np
    from named_axes import parallel as P

    x = torch.arange(96.).reshape(4, 6, 4) / 13
    mesh = P.Mesh(np.array(P.devices()), ("m",))
    errors = {}
    for name, f in _FS.items():
        want = nx.xmap(f, in_axes=["j", "i", ...], out_axes=["j", "i", ...])(x)
        with mesh:
            got = nx.xmap(f, in_axes=["j", "i", ...], out_axes=["j", "i", ...],
                          axis_resources={"j": "m"})(x)
        errors[name] = float((nx.device_get(got) - want).abs().max())
    results["errors"] = errors


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_pdot_gradient_with_the_mesh_on_another_axis(tmp_path):
    for errors in (r["errors"] for r in launch(os.path.abspath(__file__), 4, tmp_path,
                                                 timeout=300)):
        assert max(errors.values()) < 1e-9, errors


if __name__ == "__main__":
    run_rank([_scenario])
