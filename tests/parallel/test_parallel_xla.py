"""The torch-xla SPMD engine on 4 virtual CPU devices (run by ``make test-xla``).

The tutorial's strategies equal the vectorized result; inputs carry the plan's
shardings; the post-partition HLO that XLA dumps shows the collectives.
Skips cleanly where torch-xla is absent.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch

from _xla_env import four_devices, xla_dump_dir  # noqa: E402  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402

import _tutorial_program as T  # noqa: E402

SPECS = {  # strategy -> expected sharding of (w1, images)
    "batch": ("", "{devices=[4,1]0,1,2,3}"),
    "hidden": ("{devices=[1,4]0,1,2,3}", ""),
    "batch_hidden": ("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",
                     "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
}


devices = pytest.fixture(scope="module", name="devices")(four_devices)


def _dumps() -> set:
    return set(glob.glob(os.path.join(xla_dump_dir(), "*after_optimizations.txt")))


@pytest.mark.parametrize("strategy", list(T.STRATEGIES))
def test_tutorial_strategy_on_xla(devices, strategy):
    res, shape, names = T.STRATEGIES[strategy]
    d = T.data(seed=4, dtype=torch.float32)
    ref = T.loss_and_grads(T.loss, *d)
    seen = {}

    def probed(w1, w2, images, labels):
        seen["w1"] = torch_xla._XLAC._get_xla_sharding_spec(w1._data)
        seen["images"] = torch_xla._XLAC._get_xla_sharding_spec(images._data)
        seen["device"] = images._data.device.type
        return T.named_loss(w1, w2, images, labels)

    before = _dumps()
    with P.Mesh(np.array(devices).reshape(shape), names):
        out = T.loss_and_grads(T.xmapped(res, probed), *d)
    for a, b in zip(ref, out):
        assert b.device.type == "cpu"        # back where the inputs came from
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert seen["device"] == "xla"
    assert (seen["w1"], seen["images"]) == SPECS[strategy]
    new = _dumps() - before
    assert new, f"no post-partition HLO dumped in {xla_dump_dir()}"
    texts = [open(f).read() for f in new]
    assert any("all-reduce" in t for t in texts), "expected an all-reduce in the partitioned HLO"


def test_contraction_over_split_axis_is_an_all_reduce(devices):
    f = nx.xmap(lambda x, w: nx.lax.pdot(x, w, "k"), in_axes=(["k", ...], ["k", ...]),
                out_axes=[...], axis_resources={"k": "x"})
    x, w = torch.randn(8, 3), torch.randn(8, 5)
    before = _dumps()
    with P.Mesh(np.array(devices), ("x",)):
        out = f(x, w)
    torch.testing.assert_close(out, x.T @ w, rtol=1e-5, atol=1e-5)
    texts = [open(p).read() for p in _dumps() - before]
    assert any("all-reduce" in t for t in texts)


def test_empty_dynamic_slice_with_a_per_instance_start(devices):
    """An empty slice with a start that differs per mesh-split instance: the result's
    shape, no gather (torch-xla's lowering refused an empty one: mesh oracle seed 9324,
    p9324_00207)."""
    f = nx.xmap(lambda x: nx.lax.dynamic_slice(x, [3, nx.lax.axis_index("b") + 4], [0, 3]),
                in_axes=[...], out_axes=["b", ...], axis_sizes={"b": 4},
                axis_resources={"b": "x"})
    with P.Mesh(np.array(devices), ("x",)):
        out = f(torch.arange(12.0).view(3, 4))
    assert out.shape == (4, 0, 3)


def test_backend_xla_places_on_xla(devices):
    assert P.backend_device("xla").type == "xla"
    assert P.device_put(torch.ones(2), "xla").device.type == "xla"
    assert P.device_get(P.device_put(torch.ones(2), "xla")).device.type == "cpu"


def test_graphs_differing_only_in_wiring_get_their_own_executables(devices):
    """torch-xla 2.9 keys compiled graphs by a hash blind to which input feeds which op
    (pytorch/xla#8353): ``b * psum(b * b)`` after ``a * psum(a * a)`` silently ran the
    first executable.  The engine's run_graph keeps them apart."""
    g = {k: torch.randn(2, 8) for k in "abc"}

    def scaled_by(key):
        return lambda g: {k: v * nx.lax.psum((g[key] * g[key]).sum(), "shard")
                          for k, v in g.items()}

    for key in "abc":
        f = scaled_by(key)
        with P.Mesh(np.array(devices).reshape(2, 2), ("dp", "mp")):
            got = nx.xmap(f, in_axes=[["shard", ...]], out_axes=["shard", ...],
                          axis_resources={"shard": "mp"})(g)
        want = nx.xmap(f, in_axes=[["shard", ...]], out_axes=["shard", ...])(g)
        for k in g:
            torch.testing.assert_close(got[k], want[k])


def test_one_axis_on_the_mesh_and_a_loop(devices):
    """JAX's ``axis_resources={'batch': ('x', 'l')}``: two chunks, each split 4 ways."""
    d = T.data(seed=5, dtype=torch.float32)
    ref = T.loss_and_grads(T.loss, *d)
    with P.Mesh(np.array(devices), ("x",)):
        out = T.loss_and_grads(T.xmapped({"batch": ("x", P.SerialLoop(2))}), *d)
        idx = nx.xmap(lambda v: v * nx.lax.axis_index("i") + nx.lax.psum(v, "i"),
                      in_axes=["i", ...], out_axes=["i", ...],
                      axis_resources={"i": ("x", P.SerialLoop(2))})(torch.arange(16.0))
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(idx, torch.arange(16.0) ** 2 + 120.0)


def test_values_stay_on_xla_across_steps(devices):
    """Inputs already on XLA: every output stays there (no host round trip per call), the
    weights keep the plan's sharding, and after the first steps no step compiles again."""
    import torch_xla.debug.metrics as met
    from named_axes.parallel._xla import xla_device

    def metric_count(name):
        data = met.metric_data(name)
        return data[0] if data else 0

    def loss(w, x):
        return nx.lax.psum(nx.lax.pmean(((x @ w) ** 2).sum(), "batch"), "hidden")

    def step(w, x):
        value, g = nx.value_and_grad(loss, reduce_axes=("batch",))(w, x)
        return w - 0.1 * g, value

    f = nx.xmap(step, in_axes=(["hidden", ...], ["batch", ...]),
                out_axes=(["hidden", ...], [...]),
                axis_resources={"batch": "dp", "hidden": "mp"})
    dev = xla_device()
    w0, x = torch.randn(4, 3, 5) * 0.1, torch.randn(8, 3)
    w, xx = w0.to(dev), x.to(dev)
    want_w = w0
    with P.Mesh(np.array(devices).reshape(2, 2), ("dp", "mp")):
        for i in range(4):
            if i == 2:
                to_host, compiles = metric_count("TransferFromDeviceTime"), \
                    metric_count("CompileTime")
            w, value = f(w, xx)
            assert w.device.type == "xla" and value.device.type == "xla"
        steps_2_3 = (metric_count("TransferFromDeviceTime") - to_host,
                     metric_count("CompileTime") - compiles)
    assert steps_2_3 == (0, 0), steps_2_3     # no host transfer, nothing compiled again
    assert torch_xla._XLAC._get_xla_sharding_spec(w) != ""   # still split over mp
    before = metric_count("TransferFromDeviceTime")
    w = w.cpu()
    assert metric_count("TransferFromDeviceTime") > before   # the metric does count transfers
    for _ in range(4):
        want_w, _ = nx.xmap(step, in_axes=(["hidden", ...], ["batch", ...]),
                            out_axes=(["hidden", ...], [...]))(want_w, x)
    torch.testing.assert_close(w, want_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["linearize", "jacfwd", "jacrev", "hessian"])
def test_forward_mode_and_jacobians_on_xla(devices, how):
    """``linearize`` (built on torch.func.linearize, whose tangents came back zero on
    torch-xla: a silently wrong answer found by the mesh oracle, seed 0, p0_00252) and the
    Jacobians on the XLA engine match the vectorized run."""
    def body(x, y):
        f = lambda p: y + p + p * p.sin()
        if how == "linearize":
            return nx.linearize(f, x)[1](torch.cos(x) + 0.5)
        return getattr(nx, how)(lambda p: f(p).sum() if how == "hessian" else f(p))(x)

    spec = dict(in_axes=["c", ...], out_axes=["c", ...])
    x, y = torch.linspace(-1, 1, 8).reshape(4, 2), torch.linspace(0, 2, 8).reshape(4, 2)
    want = nx.xmap(body, **spec)(x, y)
    with P.Mesh(np.array(devices), ("x",)):
        got = nx.xmap(body, axis_resources={"c": "x"}, **spec)(x, y)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


def test_auto_resources_on_the_xla_mesh(devices):
    """``axis_resources='auto'`` on the XLA mesh: the plan is the engine's to run (every
    legal assignment is one the SPMD engine runs), and results equal the vectorized run;
    the choice is ``nx.plan_resources``'s for the same mesh and arguments."""
    d = T.data(seed=5, dtype=torch.float32)
    ref = T.loss_and_grads(T.loss, *d)
    auto = nx.xmap(T.named_loss, in_axes=T.IN_AXES, out_axes=[...], axis_resources="auto")
    mesh = P.Mesh(np.array(devices).reshape(2, 2), ("x", "y"))
    with mesh:
        out = T.loss_and_grads(auto, *d)
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with mesh:
        chosen = P._auto.auto_resources(auto, d)
    assert chosen == nx.plan_resources(auto, mesh, *d).axis_resources
    # and an assignment the model ranks lower runs alike
    for c in nx.explain_resources(auto, mesh, *d, top=3).candidates:
        with mesh:
            out = T.loss_and_grads(T.xmapped(c.axis_resources), *d)
        for a, b in zip(ref, out):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_checkpoint_replays_xla_random_draws(devices):
    """``nx.checkpoint`` of a function drawing random numbers on XLA tensors: its
    recomputation draws what the forward drew (torch-xla registers no ``torch.xla`` for
    checkpoint to keep the state with), and torch is left without a ``torch.xla``."""
    import torch_xla.core.xla_model as xm

    f = lambda w: torch.nn.functional.dropout(w.sin(), 0.5).pow(2).sum()
    w = torch.linspace(-1, 1, 64, device=torch_xla.device())
    grads = []
    for fun in (f, nx.checkpoint(f)):
        xm.set_rng_state(1234)
        grads.append(nx.grad(fun)(w).cpu())
    torch.testing.assert_close(grads[1], grads[0])
    assert grads[0].count_nonzero() not in (0, 64)   # the mask dropped some, kept some
    assert not hasattr(torch, "xla")


@pytest.mark.timeout(300)
def test_auto_bench_measures_every_assignment_on_xla(devices):
    """benchmarks/bench_auto.py --engine xla: the tutorial MLP's every legal assignment of
    a 4x1 mesh of XLA devices run and timed beside the model's ranking (one process)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "bench_auto.py"), "--engine", "xla",
         "--programs", "mlp", "--meshes", "4x1", "--steps", "1", "--table"],
        cwd=root, capture_output=True, text=True, timeout=280,
        env=dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mlp on 4x1: auto" in proc.stdout and "0 refused" in proc.stdout, proc.stdout
    assert proc.stdout.count("measured") >= 5   # the summary and one row per assignment
