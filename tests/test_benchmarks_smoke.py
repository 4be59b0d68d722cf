"""Smoke test for the benchmark suite (benchmarks/run.py --quick).

Runs the harness end to end on two small programs, without torch.compile (slow to
compile on CI): every variant must build and pass its numerical check or be reported
n/a. No assertion on speed, ever — the numbers are judged from benchmarks/RESULTS.md.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "benchmarks", "run.py")


@pytest.mark.hunt   # a subprocess running 3 programs x 9 variants: make test-all runs it
@pytest.mark.timeout(600)
def test_quick_benchmark_runs(tmp_path):
    out = tmp_path / "RESULTS.md"
    variants = "eager,vmap,fdim,nx.xmap,nx.vg,nx.jit,nx.jit.fb,nx.jit.det,jax.jit"
    proc = subprocess.run(
        [sys.executable, RUN, "--quick", "--programs", "p1_small,p3_chain,p1_small_train",
         "--variants", variants, "--no-p4", "--no-parallel", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=580,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "| p1_small |" in text and "| p3_chain |" in text and "| p1_small_train |" in text
    # the user's form: weights that require grad, forward + compiled backward, and the
    # detached-weights row as a labelled extra
    assert "| p1_small | nx.jit.fb | ok |" in text and "| p1_small | nx.jit.det | ok |" in text
    assert "| p1_small_train | nx.jit | ok |" in text
    assert "torch eager" in text and "torch " in text and "command:" in text
    # every variant is checked against plain torch before timing: none may be wrong
    assert "| WRONG |" not in text and "| wrong |" not in text, text


def test_harness_reports_missing_pieces_as_na():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import harness
    finally:
        sys.path.pop(0)
    import torch

    def missing():
        raise harness.NotAvailable("nx.frobnicate not available")

    x = torch.ones(3)
    res = harness.measure(
        [harness.Variant("eager", lambda: (lambda: x * 2)),
         harness.Variant("same", lambda: (lambda: x + x)),
         harness.Variant("bad", lambda: (lambda: x * 3)),
         harness.Variant("absent", missing)],
        rounds=2, block_s=0.001, warmup=1, verbose=False)
    assert res["same"].status == "ok" and res["same"].rounds == 2
    assert res["bad"].status == "wrong"
    assert res["absent"].status == "n/a" and "frobnicate" in res["absent"].note


def test_startup_bench_measures_imports_and_reports_targets():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_startup
    finally:
        sys.path.pop(0)
    imports = bench_startup.measure_import(reps=1)  # three real child processes
    assert 0 < imports["torch"] and 0 < imports["named_axes"]
    assert 0 < imports["named_axes from source"]
    # the timed import read bytecode, as an installed wheel's does
    cache = os.path.join(ROOT, "named_axes", "transforms", "__pycache__")
    assert any(f.startswith("_jit.") and f.endswith(".pyc") for f in os.listdir(cache))
    text = "\n".join(bench_startup.report(
        {"torch": 2.0, "named_axes": 2.2, "named_axes from source": 2.6}, {}))
    assert "| the same, named_axes compiled from source (no bytecode) | 2.60 s | 1.30 | |" in text
    first = {("nx.jit", "cold"): 3.0, ("nx.jit", "warm"): 1.0, ("JAX jit", "cold"): 0.4,
             ("torch.compile", "cold"): 4.0}
    text = "\n".join(bench_startup.report({"torch": 2.0, "named_axes": 2.2}, first))
    assert "| 1.10 | meets target ≤ 1.3× |" in text
    assert "MISSES target ≤ 2× JAX first call (2.50×)" in text
    assert "meets target ≤ torch.compile cold (0.75×)" in text
    first[("make_fx of x + 1", "floor")] = 1.1
    text = "\n".join(bench_startup.report({"torch": 2.0, "named_axes": 2.2}, first))
    assert "takes 1.10 s" in text and "2x JAX's first call is 0.80 s." in text
    first.update({("nx.jit + program store", "cold"): 3.5,
                  ("nx.jit + program store", "warm"): 0.008,
                  ("nx.jit + program store", "saved after"): 7.0})
    text = "\n".join(bench_startup.report({"torch": 2.0, "named_axes": 2.2}, first))
    assert ("| P1 small train step, nx.jit + program store, first call, warm cache | 8.0 ms "
            "| | meets target ≤ 2× JAX first call (0.02×) |") in text
    assert "packaging (7.0 s, measured" in text and "saved after" not in text
    floor = bench_startup._child(bench_startup._MAKE_FX_FLOOR)   # a real child process
    assert 0 < floor < 60


@pytest.mark.distributed
@pytest.mark.hunt   # three 4-rank launches (test_gpt_mesh checks the same steps in make test)
@pytest.mark.timeout(600)
def test_sharded_bench_runs_both_versions_on_a_2x2_mesh():
    """bench_sharded: gpt_mesh in one process and on 4 gloo ranks, and the hand-written
    parallelize_module baseline (tp_baseline.py) on the same mesh; a table comes out."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_sharded
    finally:
        sys.path.pop(0)
    text = bench_sharded.main(["--steps", "3", "--repeats", "1", "--no-compile"])
    assert "hand-written DTensor TP" in text and "named_axes, 2x2 mesh" in text
    assert "nx.jit step" in text
    assert "all_reduce" in text


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_auto_bench_measures_every_assignment():
    """bench_auto: on 4 gloo ranks the tutorial MLP's every legal assignment of a 4x1
    mesh is run and timed beside the model's ranking."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_auto

    text = bench_auto.main(["--programs", "mlp", "--meshes", "4x1", "--steps", "1", "--table"])
    assert "mlp on 4x1: auto" in text and "Spearman" in text and "0 refused" in text
    assert text.count("measured") >= 5   # the summary and one row per assignment


@pytest.mark.hunt   # (test_auto_resources prices GPT-J in make test already)
def test_plan_bench_prints_its_figure():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_plan.py"), "--repeat", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "plan_resources, GPT-J (tiny_config) on a 2x2x2 mesh:" in proc.stdout


@pytest.mark.hunt   # four compiles: make test-all runs it
@pytest.mark.timeout(600)
def test_compile_guards_bench_prints_its_table():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "compile_guards.py"), "--calls", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=580,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| p1_", "| p3_"))]
    assert len(rows) == 4 and all(len(r.split("|")) == 7 for r in rows), proc.stdout


def test_targets_against_torch_compile_in_the_same_mode():
    """``run.py --mode max-autotune`` judges nx.jit against torch.compile of the twin in
    that mode (issue 30: at most 1.03x); torch.compile(nx.xmap) keeps its 1.05x."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import harness
        import run
    finally:
        sys.path.pop(0)
    res = {"compile": harness.Result("compile", ratio=0.5),
           "nx.jit": harness.Result("nx.jit", ratio=0.514),
           "nx.compile": harness.Result("nx.compile", ratio=0.52)}
    assert run._target_verdict("p3_chain", "nx.compile", res).startswith("meets")
    res["nx.xmap"] = harness.Result("nx.xmap", ratio=2.4)   # a plain factor of eager
    assert run._target_verdict("p3_chain", "nx.xmap", res) == "meets target ≤ 2.5× (2.50)"
    targets = {name: dict(t) for name, t in run.TARGETS.items()}
    try:
        for t in run.TARGETS.values():
            t["nx.jit"] = "compile_1.03"
        assert run._target_verdict("p3_chain", "nx.jit", res) == \
            "meets target ≤ 1.03 × torch.compile (0.52)"
        res["nx.jit"] = harness.Result("nx.jit", ratio=0.52)
        assert run._target_verdict("p3_chain", "nx.jit", res).startswith("MISSES")
    finally:
        run.TARGETS.clear()
        run.TARGETS.update(targets)
