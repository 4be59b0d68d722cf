"""Both ends of the torchrun-launched gloo tests: ``launch`` (in the test process) starts
``nproc`` ranks of a worker script and reads back what each rank wrote; ``run_rank`` (in
each rank) runs the worker's scenarios and writes ``rank{R}.json``.

A scenario is ``fn(rank, results)`` filling the ``results`` dict; an exception in any
scenario is recorded under ``"exception"`` and reported by ``launch`` with the rank.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from datetime import timedelta

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker: str, nproc: int, out, timeout: float) -> list:
    """Run ``worker`` on ``nproc`` gloo ranks (torchrun, 127.0.0.1); each rank's results."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", worker, str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in {timeout} s:\n{(e.stderr or '')[-3000:]}")
    results = []
    for r in range(nproc):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote nothing (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
        data = json.loads(path.read_text())
        assert "exception" not in data, f"rank {r} failed:\n{data['exception']}"
        results.append(data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results


def run_rank(scenarios) -> None:
    """In a rank: run every scenario, write ``rank{R}.json`` into ``sys.argv[1]``, leave."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.set_default_dtype(torch.float64)
    results: dict = {}
    try:
        for fn in scenarios:
            fn(rank, results)
    except BaseException:
        results["exception"] = traceback.format_exc()
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()
    # Leave without running C++ static destructors: gloo's worker threads have been seen
    # to abort at interpreter exit ('terminate called without an active exception',
    # SIGABRT) after a clean destroy_process_group, failing a job that succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def err(a, b) -> float:
    """Max abs difference over two sequences of tensors."""
    return max(float((x - y).abs().max()) for x, y in zip(a, b))
