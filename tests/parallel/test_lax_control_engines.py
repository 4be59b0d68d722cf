"""nx.lax loops, cond and dynamic slicing on the partitioning engines: the results of a
``SerialLoop`` run, of the DTensor engine (4 gloo ranks on 127.0.0.1, torchrun, bounded
by timeouts) and of the torch-xla engine (4 CPU devices, ``make test-xla``) equal the
vectorized run's.

The program mixes what a chunk or rank cannot decide alone: per-instance starts
(``axis_index`` arithmetic) into a shared and a per-instance operand, ``fori_loop`` /
``scan`` with a collective over the mapped axis in the body, ``cond`` with a
per-instance predicate, ``while_loop`` / ``fori_loop`` with per-instance trip counts
(every chunk and rank must run the same number of steps, or the collectives in the body
meet different ones elsewhere), and gradients through the per-instance slices.

This file is also the DTensor worker: torchrun runs it as a script (``__main__``).
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _xla_env  # noqa: E402,F401  (sets PJRT/XLA_FLAGS before torch-xla can start)
import named_axes as nx  # noqa: E402
from named_axes import lax as L  # noqa: E402

N, M = 8, 6          # instances of 'i', positional size of each row


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, M, generator=g), torch.randn(10, generator=g)


def program(x, w):
    """One row ``x`` of ``i`` and a shared ``w``; every output carries ``i``."""
    i = L.axis_index('i')
    a = L.dynamic_slice(w, [i * 2 - 3], [3])                  # shared operand, clamped
    b = L.dynamic_slice_in_dim(x, i - 4, 2, axis=0)           # negative starts wrap once
    c = L.dynamic_update_slice(x, a[:2] * 10, [5 - i])
    d = L.fori_loop(0, 3, lambda j, v: L.dynamic_update_index_in_dim(
        v, v[j] * 0.5 + L.psum(v[j], 'i') * 0.1, j, 0), x)
    carry, ys = L.scan(lambda s, y: (s * 0.5 + y, s - L.pmean(y, 'i')), x[0], x)
    e = L.cond(i % 3 == 0, lambda v: v * 2 + L.psum(v, 'i'), lambda v: torch.sin(v), x)
    lim = i // 2 + 1                                          # per-instance trip counts
    f = L.while_loop(lambda s: s[0] < lim,
                     lambda s: (s[0] + 1, s[1] + L.psum(s[1], 'i') * 0.05 + x[:2]),
                     (0, x[:2]))[1]
    h = L.fori_loop(0, lim, lambda j, v: torch.cos(v) + L.pmax(v, 'i'), x[2:4])
    gw = nx.grad(lambda w: (L.dynamic_slice(w * x[0], [i - 2], [4]) ** 2).sum())(w)
    gx = nx.grad(lambda x: L.fori_loop(0, 2, lambda j, v: torch.sin(
        L.dynamic_update_slice(v, v[:2] * x[j], [i])), x).sum())(x)
    return a, b, c, d, carry, ys, e, f, h, gw, gx


OUT_AXES = (['i', ...],) * 11


def run(resources=None):
    f = nx.xmap(program, in_axes=(['i', ...], [...]), out_axes=OUT_AXES,
                axis_resources=resources or {})
    return f(*inputs())


def _close(got, want):
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=lambda m: f"output {j}: {m}")


# -- SerialLoop -------------------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 4, 8])
def test_serial_loop_equals_vectorized(k):
    _close(run({'i': nx.SerialLoop(k)}), run())


def test_serial_loop_gradients_outside_the_xmap():
    """torch.autograd through the chunks: the same gradients as the vectorized run."""
    def grads(res):
        x, w = (t.requires_grad_() for t in inputs())
        f = nx.xmap(program, in_axes=(['i', ...], [...]), out_axes=OUT_AXES,
                    axis_resources=res or {})
        outs = f(x, w)
        loss = sum((o * torch.cos(torch.arange(o.numel(), dtype=o.dtype)).reshape(o.shape)).sum()
                   for o in outs[:9])
        return torch.autograd.grad(loss, (x, w))
    _close(grads({'i': nx.SerialLoop(2)}), grads(None))


# -- torch-xla (4 CPU devices) ----------------------------------------------------------

@pytest.mark.xla
@pytest.mark.parametrize("res", [{'i': 'x'}, {'i': ('x', 'y')}, {'i': 'y'}])
def test_xla_engine_equals_vectorized(res):
    # (index values -- axis_index -- stay on the CPU there: the starts and predicates
    # made from them are moved to the operands' XLA device)
    pytest.importorskip("torch_xla")
    import numpy as np

    from named_axes import parallel as P

    devs = P.devices("xla")
    if len(devs) < 4:
        pytest.skip(f"needs 4 XLA devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=4), got {len(devs)}")
    with P.Mesh(np.array(devs[:4]).reshape(2, 2), ("x", "y")):
        got = run(res)
    _close([g.cpu() for g in got], run())


# -- DTensor (4 gloo ranks) -------------------------------------------------------------

def _dtensor_scenario(rank, results):
    """On each rank: the program on a 1-d mesh of the 4 ranks ('i' split 2 per rank), on
    each rank's shards; the max abs error against the vectorized run in this process."""
    import numpy as np

    from named_axes import parallel as P

    torch.set_default_dtype(torch.float32)
    ref = run()
    with P.Mesh(np.array(P.devices()), ("x",)):
        outs = run({'i': 'x'})
    outs = [o.full_tensor() if hasattr(o, "full_tensor") else o for o in outs]
    results["local"] = {"err": [float((o - r).abs().max()) for o, r in zip(outs, ref)],
                        "shapes": [list(o.shape) for o in outs]}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from _ranks import launch

    return launch(os.path.abspath(__file__), 4, tmp_path_factory.mktemp("lax_control"),
                  timeout=300)


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_dtensor_engine_equals_vectorized(ranks):
    path = "local"
    want = [list(o.shape) for o in run()]
    for r, res in enumerate(ranks):
        assert res[path]["shapes"] == want, (r, res[path]["shapes"])
        bad = {j: e for j, e in enumerate(res[path]["err"]) if not e < 1e-5}
        assert not bad, f"rank {r}, {path} path: outputs differ by {bad}"


if __name__ == "__main__":          # one torchrun rank
    from _ranks import run_rank

    run_rank([_dtensor_scenario])
