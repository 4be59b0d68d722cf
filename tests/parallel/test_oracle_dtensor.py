"""Resources never change results, on the DTensor engine: a seeded sample of the oracle's
generated programs on 4 gloo ranks (127.0.0.1), each named axis assigned to a 2x2 mesh
``('x', 'y')`` or a 1-d mesh ``('w',)`` in every sensible way (``mesh_runs.assignments``).
Every rank's result must equal its own vectorized run (values, shapes, named shapes
inside the xmap), or the run must raise a ``NamedAxisError`` (and must raise where the
vectorized run rejects); all ranks must end each run the same way.

Every ``NX_ORACLE_MESH_JIT``-th program (default 4; 0: none) also runs under ``nx.jit``,
its input gradients through the forward and backward programs nx.jit cuts from its trace.
``NX_ORACLE_MESH_N`` / ``NX_ORACLE_MESH_SEED`` / ``NX_ORACLE_MESH_PER_PROG`` (0 = every
assignment) widen the hunt (``make fuzz-oracle-mesh``); ``NX_ORACLE_MESH_TIMEOUT``
bounds the launch (seconds).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))

import mesh_runs  # noqa: E402
from _ranks import free_port  # noqa: E402

TIMEOUT = float(os.environ.get("NX_ORACLE_MESH_TIMEOUT", "400"))
pytestmark = [pytest.mark.distributed, pytest.mark.hunt, pytest.mark.timeout(TIMEOUT + 60)]
NPROC = 4
N, SEED, PER_PROG = mesh_runs.knobs(default_n=200, default_per_prog=3)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("oracle_dtensor")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={NPROC}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}",
           os.path.join(HERE, "_oracle_dtensor_worker.py"), str(out), str(N), str(SEED),
           str(PER_PROG)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired as e:
        where = {r: (out / f"rank{r}.progress").read_text()
                 for r in range(NPROC) if (out / f"rank{r}.progress").exists()}
        pytest.fail(f"torchrun did not finish in {TIMEOUT} s; the ranks were running {where}"
                    f"\n{(e.stderr or '')[-3000:]}", pytrace=False)
    results = []
    for r in range(NPROC):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote nothing (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    return results


def test_ranks_finish(ranks):
    for r, res in enumerate(ranks):
        assert "exception" not in res, f"rank {r} failed:\n{res['exception']}"
        assert res["programs"] == N
    print(f"\noracle on DTensor: {N} programs (seed {SEED}), {ranks[0]['seconds']:.1f} s; "
          f"runs {ranks[0]['runs']}")


def test_dtensor_runs_agree_with_vectorized(ranks):
    """Fails on a difference that matches no class of ``known.KNOWN_CLASSES``."""
    progs = mesh_runs.sample(N, SEED)
    for r, res in enumerate(ranks):
        if "exception" in res:
            pytest.skip("a rank failed (test_ranks_finish reports it)")
        bad, by_class = mesh_runs.unknown(res, progs)
        if r == 0 and by_class:
            print(f"\nknown classes (rank 0): {by_class}")
        if bad["fails"]:
            pytest.fail(f"rank {r}: " + mesh_runs.report(bad, progs), pytrace=False)


PINS = ["vjp", "vjp_loop", "jvp", "einsum3_loop", "einsum_two_mesh_dims", "custom_jvp_vjp",
        "jvp_closure", "fold_after_ring_sum", "einsum3_two_mesh_dims", "grad2_abs_raises"]


@pytest.mark.parametrize("pin", PINS)
def test_pinned_bugs_stay_fixed(ranks, pin):
    """Bugs the sample found (see ``_oracle_dtensor_worker.PINS``), on every rank."""
    for r, res in enumerate(ranks):
        if "exception" in res:
            pytest.skip("a rank failed (test_ranks_finish reports it)")
        got = res["pins"][pin]
        assert isinstance(got, float) and got < 1e-5, (r, got)


def test_pinned_corpus_programs_stay_fixed(ranks):
    """Generated programs the sample found wrong (``_oracle_dtensor_worker.CORPUS_PINS``),
    with and without nx.jit, input gradients included, equal the vectorized run."""
    for r, res in enumerate(ranks):
        if "exception" in res:
            pytest.skip("a rank failed (test_ranks_finish reports it)")
        assert res["corpus_pins"] == [], (r, res["corpus_pins"])


def test_sample_runs_on_the_mesh(ranks):
    """The sample exercises the engine: most runs are accepted, over both meshes, every
    one on each rank's shards."""
    res = ranks[0]
    runs = res.get("runs", {})
    ok = sum(v for k, v in runs.items() if k.endswith(" ok"))
    assert ok > sum(runs.values()) // 2, runs
    assert runs.get("xy ok", 0) and runs.get("w ok", 0), runs
    assert 0 < res["local_shard_runs"] <= res["calls"], res
    # and every 4th program under nx.jit too (its gradients by the cut joint program)
    assert runs.get("jit xy ok", 0) + runs.get("jit w ok", 0), runs
