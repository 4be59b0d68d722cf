"""Distributed failure modes end the job with an error naming the rank, in bounded time.

Real 2-rank gloo process groups on 127.0.0.1 run an xmap whose named axis is split over
a mesh axis (the library's DTensor engine), so every rank must join a collective.
Then one rank misbehaves:

- ``raise``: rank 1 raises before the collective;
- ``die``: rank 1 is killed (``os._exit``) before the collective;
- ``mismatch``: rank 1 runs a different program (another input shape), so the ranks'
  collectives do not match.  The DTensor engine compares a digest of every rank's
  inputs (dtypes, shapes, names) before it runs and raises on every rank, naming them.

Both launchers are covered: ``torchrun`` (the launcher the library documents, SPEC §5)
and ``torch.multiprocessing.start_processes``.  Every launch runs in a subprocess
with a hard timeout; the process group has a short collective timeout, so a rank left
waiting for a dead or diverged peer fails instead of hanging.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

HARD_LIMIT_S = 150      # the whole launch, including two torch imports on a busy machine
PG_TIMEOUT_S = 20       # gloo collective timeout inside the ranks

WORKER = textwrap.dedent('''
    import os, sys, time, traceback
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist

    import named_axes as nx
    from named_axes import parallel as P

    PG_TIMEOUT_S = {pg_timeout}


    def program(rank, scenario):
        n = 8
        if scenario == "mismatch" and rank == 1:
            n = 6          # a different program: other sizes, other collectives
        f = nx.xmap(lambda x: nx.lax.psum(x * 2.0, "i"), in_axes=["i", ...], out_axes=[...],
                    axis_resources={{"i": "x"}})
        if scenario == "raise" and rank == 1:
            raise ValueError("boom on rank 1")
        if scenario == "die" and rank == 1:
            sys.stderr.flush()
            os._exit(13)
        with P.Mesh(np.array(P.devices()), ("x",)):
            out = f(torch.ones(n, 3))
        if scenario != "mismatch":   # there the library itself must object
            assert torch.equal(out, torch.full((3,), 2.0 * n)), out
        print(f"rank {{rank}} ok: {{out.tolist()}}", flush=True)


    def main(rank, world, scenario, init):
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                timeout=timedelta(seconds=PG_TIMEOUT_S))
        try:
            program(rank, scenario)
            dist.barrier()
        except BaseException as e:
            # Name the rank in what this process reports, whatever it was; printed too, since
            # mp's join reports one failed process, and the peer that lost its connection to
            # this one may be the one it reports.
            report = f"rank {{rank}} of {{world}} raised: {{type(e).__name__}}: {{e}}"
            print(report, file=sys.stderr, flush=True)
            if scenario in ("raise", "die") and rank != 1:
                time.sleep(2)   # the victim of rank 1's failure: let the launcher see rank 1's first
            raise RuntimeError(report) from e
        dist.destroy_process_group()
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(0)   # skip C++ destructors: gloo threads can abort at exit


    if __name__ == "__main__":
        launcher, scenario = sys.argv[1], sys.argv[2]
        if launcher == "torchrun":
            main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), scenario, "env://")
        else:
            import torch.multiprocessing as mp

            port = int(sys.argv[3])
            mp.start_processes(main, args=(2, scenario, f"tcp://127.0.0.1:{{port}}"), nprocs=2,
                               join=True, start_method="spawn")
''').format(pg_timeout=PG_TIMEOUT_S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path, launcher: str, scenario: str):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
               "--nnodes=1", "--max-restarts=0", "--master-addr=127.0.0.1",
               f"--master-port={port}", str(script), "torchrun", scenario]
    else:
        cmd = [sys.executable, str(script), "mp", scenario, str(port)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HARD_LIMIT_S,
                              env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-2000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-2000:]
        pytest.fail(f"{launcher} {scenario}: the job hung past {HARD_LIMIT_S} s\n{out}")
    return proc, time.monotonic() - start, proc.stdout + proc.stderr


# How each launcher names the failing process in its report.
_NAMES_RANK = {
    "torchrun": r"rank\s*:\s*{r}\b|rank {r} of 2",
    "mp": r"[Pp]rocess {r} terminated|rank {r} of 2",
}


def test_healthy_job_succeeds(tmp_path):
    """The baseline: the same program with well-behaved ranks finishes and agrees."""
    proc, took, out = _launch(tmp_path, "torchrun", "ok")
    assert proc.returncode == 0, out[-3000:]
    assert "rank 0 ok" in out and "rank 1 ok" in out


@pytest.mark.parametrize("launcher", ["torchrun", "mp"])
def test_a_rank_that_raises_ends_the_job_naming_it(tmp_path, launcher):
    proc, took, out = _launch(tmp_path, launcher, "raise")
    assert proc.returncode != 0, out[-3000:]
    assert re.search(_NAMES_RANK[launcher].format(r=1), out), out[-3000:]
    assert "boom on rank 1" in out, out[-3000:]
    assert took < HARD_LIMIT_S


@pytest.mark.parametrize("launcher", ["torchrun", "mp"])
def test_a_rank_that_dies_ends_the_job_naming_it(tmp_path, launcher):
    proc, took, out = _launch(tmp_path, launcher, "die")
    assert proc.returncode != 0, out[-3000:]
    assert re.search(_NAMES_RANK[launcher].format(r=1), out), out[-3000:]
    assert re.search(r"exit(code| code)\s*:?\s*13", out), out[-3000:]
    assert took < HARD_LIMIT_S


@pytest.mark.parametrize("launcher", ["torchrun", "mp"])
def test_mismatched_programs_end_the_job_naming_a_rank(tmp_path, launcher):
    proc, took, out = _launch(tmp_path, launcher, "mismatch")
    assert proc.returncode != 0, out[-3000:]
    # Which rank notices first depends on timing; the report must name one of them.
    assert re.search(_NAMES_RANK[launcher].format(r="[01]"), out), out[-3000:]
    assert "AssertionError" not in out   # the library objected, not a check of ours
    assert "the ranks were given different inputs" in out, out[-3000:]
    assert re.search(r"rank 1: leaf 0: torch.float32 physical \(6, 3\)", out), out[-3000:]
    assert took < HARD_LIMIT_S
