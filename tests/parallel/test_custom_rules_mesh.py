"""custom_vjp / custom_jvp rules run by autograd after an xmap on a mesh returned (found while
merging the autodiff transforms, transforms/_grad.py and _custom.py).

A custom_vjp's backward, run by autograd after the xmap on a mesh returned, runs in the
call's axis environment, as a custom_jvp's transposed rule does (its collectives ran
without the mesh's engine: a wrong first derivative), and sums its
results back in the call's axis environment: a result carrying an axis split over the
ranks that its input lacks is summed over every rank (it was summed over the local
shard only: a first derivative differing per rank), and a result lacking a split axis
its input carries, differentiated again (create_graph), has its gradient summed over
every rank's instances (``_engine.handed``, as a vjp cotangent's).  Run on 4 gloo ranks:
this file is also the worker script (``__main__``).
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _ranks import launch, run_rank  # noqa: E402

import named_axes as nx  # noqa: E402


@nx.custom_vjp
def _summed_cotangent(x):
    return x * 1.0


# the cotangent of x (which carries 'm') psum'd: a value lacking 'm'
_summed_cotangent.defvjp(lambda x: (x * 1.0, None),
                         lambda _, g: (nx.lax.psum(g, "m"),))


@nx.custom_vjp
def _times(x, w):
    return x * w


# w's cotangent carries 'm', which w lacks
_times.defvjp(lambda x, w: (x * w, (x, w)), lambda r, g: (g * r[1], g * r[0]))


@nx.custom_jvp
def _psummed(x):
    return x * nx.lax.psum(x, "m")


@_psummed.defjvp
def _psummed_rule(primals, tangents):   # transposed in the backward: its psums too
    (x,), (t,) = primals, tangents
    return _psummed(x), t * nx.lax.psum(x, "m") + x * nx.lax.psum(t, "m")


def _body(x, w):
    y = _summed_cotangent(x * w)
    return nx.lax.psum((y * x * w).sum() + (_times(x, w) ** 2).sum()
                       + (_psummed(x * w) * x).sum(), "m")


def _first_and_second(xs, run) -> list:
    gw = torch.autograd.grad(run(*xs), xs[1], create_graph=True)[0]
    total = (gw * gw).sum()
    return [nx.device_get(t) for t in (gw, *torch.autograd.grad(total, xs))]


def _scenario(rank, results):
    import numpy as np
    from named_axes import parallel as P

    g = torch.Generator().manual_seed(3)
    args = [torch.randn(8, 4, generator=g), torch.randn(4, generator=g)]
    ax = (["m", ...], [...])
    want = _first_and_second([a.clone().requires_grad_() for a in args],
                   nx.xmap(_body, in_axes=ax, out_axes=[...]))
    mesh = P.Mesh(np.array(P.devices()), ("x",))
    with mesh:
        got = _first_and_second([a.clone().requires_grad_() for a in args],
                      nx.xmap(_body, in_axes=ax, out_axes=[...], axis_resources={"m": "x"}))
    results["errors"] = [float((a - b).abs().max()) for a, b in zip(got, want)]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_custom_vjp_bwd_results_summed_back_on_a_mesh(tmp_path):
    """The gradient of w and the second derivatives equal the vectorized run's."""
    for r, res in enumerate(launch(os.path.abspath(__file__), 4, tmp_path, timeout=300)):
        assert max(res["errors"]) < 1e-9, (r, res)


if __name__ == "__main__":
    run_rank([_scenario])
