"""Gradients taken after an xmap on a mesh returned (``torch.autograd.grad`` on its
output), through every collective and ``nx.checkpoint``: equal to the vectorized run's,
and the gradient ``nx.grad`` takes inside the xmap equals the vectorized one.  Run on
4 gloo ranks: this file is also the worker script (``__main__``).
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

L = nx.lax

_BODIES = {
    "psum": lambda x, w: L.psum(x * w, "i") * x,
    "pmean": lambda x, w: L.pmean((x * w).sin(), "i") * x,
    "pmax": lambda x, w: L.pmax(x * w, "i") * x,
    "pmin": lambda x, w: L.pmin(x * w, "i") * x,
    "pdot": lambda x, w: L.pdot(x * w, x, "i") * w,
    "all_gather": lambda x, w: L.all_gather(x * w, "i").sin().sum(0) * x,
    "psum_scatter": lambda x, w: L.psum_scatter((x * w)[:4], "i") * x[0],
    "all_to_all": lambda x, w: L.all_to_all((x * w)[:4], "i", 0, 0).sin() * x[:4],
    "ppermute": lambda x, w: L.ppermute(x * w, "i", [(j, (j + 1) % 4) for j in range(4)]) * x,
    "axis_index": lambda x, w: (x * w) ** 2 * L.axis_index("i"),
    "checkpoint": lambda x, w: nx.checkpoint(
        lambda a, b: (L.psum(a * b, "i") * a * L.axis_index("i")).sin())(x, w),
}


def _loss(name):
    return lambda x, w: L.psum(_BODIES[name](x, w).sum(), "i")


def _after(name, resources, args) -> list:
    """The loss and its gradients, taken after the call returned."""
    x, w = (a.clone().requires_grad_() for a in args)
    out = nx.xmap(_loss(name), in_axes=(["i", ...], [...]), out_axes=[...],
                  **resources)(x, w)
    return [nx.device_get(t) for t in (out, *torch.autograd.grad(out, (x, w)))]


def _inside(name, resources, args):
    """The gradient of ``w`` nx.grad takes inside the xmap."""
    f = nx.xmap(lambda x, w: nx.grad(lambda v: _loss(name)(x, v))(w),
                in_axes=(["i", ...], [...]), out_axes=["i", ...], **resources)
    return nx.device_get(f(*args))


def _scenario(rank, results):
    import numpy as np
    from named_axes import parallel as P

    g = torch.Generator().manual_seed(5)
    args = [torch.randn(4, 8, generator=g), torch.randn(8, generator=g)]
    mesh = P.Mesh(np.array(P.devices()), ("x",))
    errors = {}
    for name in _BODIES:
        want = _after(name, {}, args)
        with mesh:
            got = _after(name, {"axis_resources": {"i": "x"}}, args)
        errs = [float((a - b).abs().max()) for a, b in zip(got, want)]
        if name != "checkpoint":   # (nx.checkpoint runs directly under nx.grad)
            inner = _inside(name, {}, args)
            with mesh:
                got = _inside(name, {"axis_resources": {"i": "x"}}, args)
            errs.append(float((got - inner).abs().max()))
        errors[name] = errs
    results["errors"] = errors
    # a mesh of ranks 0 and 1 only, whose groups no program built yet: they agree on an
    # nx.jit program among themselves (they waited for ranks 2 and 3 until the timeout)
    if rank < 2:
        with P.Mesh(np.array(P.devices())[:2], ("x",)):
            results["jit"] = nx.jit(lambda x: x * 2)(torch.ones(2)).tolist()


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_jit_under_a_mesh_of_fewer_ranks(ranks_results):
    """nx.jit under a mesh spanning ranks 0 and 1 only, before its groups exist, runs
    on those two ranks without waiting for the others."""
    assert [r.get("jit") for r in ranks_results] == [[2.0, 2.0]] * 2 + [None] * 2


@pytest.fixture(scope="module")
def ranks_results(tmp_path_factory):
    return launch(os.path.abspath(__file__), 4, tmp_path_factory.mktemp("r2_mesh"), timeout=300)


@pytest.fixture(scope="module")
def ranks_errors(ranks_results):
    return [res["errors"] for res in ranks_results]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_gradients_after_the_call_on_a_mesh(ranks_errors):
    """Every collective's gradient taken after the call (and, pdot's aside, the one
    nx.grad takes inside it) equals the vectorized run's on every rank."""
    for r, errors in enumerate(ranks_errors):
        errors = dict(errors, pdot=errors["pdot"][:3])
        bad = {k: v for k, v in errors.items() if max(v) > 1e-9}
        assert not bad, (r, bad)


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_pdot_gradient_inside_the_call_on_a_mesh(ranks_errors):
    """nx.grad of a pdot whose result carries no named axis, inside the xmap on a mesh,
    equals the vectorized run's."""
    for errors in ranks_errors:
        assert errors["pdot"][3] < 1e-9


if __name__ == "__main__":
    run_rank([_scenario])
