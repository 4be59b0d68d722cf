"""Resources never change results, on the torch-xla SPMD engine (``make test-xla``): a
seeded sample of the oracle's generated programs on 4 XLA CPU devices, each named axis
assigned to a 2x2 mesh ``('x', 'y')`` or a 1-d mesh ``('w',)`` (``mesh_runs.assignments``).
Each run must equal the vectorized run in this process (values, shapes, named shapes
inside the xmap), or raise a ``NamedAxisError`` (and raise where the vectorized run
rejects).  Skips cleanly where torch-xla is absent.

``NX_ORACLE_MESH_N`` / ``NX_ORACLE_MESH_SEED`` / ``NX_ORACLE_MESH_PER_PROG`` (0 = every
assignment) widen the hunt (``make fuzz-oracle-mesh``).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "oracle"))
import mesh_runs  # noqa: E402

from named_axes import parallel as P  # noqa: E402

N, SEED, PER_PROG = mesh_runs.knobs(default_n=250, default_per_prog=3)
# the inputs' gradients (torch.autograd outside the xmap) compared too
GRADS = os.environ.get("NX_ORACLE_MESH_GRADS", "1") == "1"


@pytest.fixture(scope="module")
def outcome():
    devs = P.devices("xla")
    if len(devs) < 4:
        pytest.skip(f"needs 4 XLA devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=4), got {len(devs)}")
    devs = np.array(devs[:4])
    meshes = {"xy": P.Mesh(devs.reshape(2, 2), ("x", "y")), "w": P.Mesh(devs, ("w",))}
    progs = mesh_runs.sample(N, SEED)
    t0 = time.time()
    result = mesh_runs.run_sample(progs, SEED, PER_PROG, meshes, grads=GRADS)
    print(f"\noracle on torch-xla: {N} programs (seed {SEED}), {time.time() - t0:.1f} s; "
          f"runs {result['runs']}")
    return progs, result


def test_xla_runs_agree_with_vectorized(outcome):
    """Fails on a difference that matches no class of ``known.KNOWN_CLASSES``."""
    progs, result = outcome
    bad, by_class = mesh_runs.unknown(result, progs)
    if by_class:
        print(f"\nknown classes: {by_class}")
    if bad["fails"]:
        pytest.fail(mesh_runs.report(bad, progs), pytrace=False)


def test_sample_runs_on_the_mesh(outcome):
    """The sample exercises the engine: most runs are accepted, over both meshes."""
    runs = outcome[1]["runs"]
    ok = sum(v for k, v in runs.items() if k.endswith(" ok"))
    assert ok > sum(runs.values()) // 2, runs
    assert runs.get("xy ok", 0) and runs.get("w ok", 0), runs
