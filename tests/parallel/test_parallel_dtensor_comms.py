"""The DTensor engine communicates no more than hand-written DTensor code (2 gloo ranks).

A data-parallel step (every rank passes the full inputs, gets the full loss, and the full
gradients reach the inputs) needs: the engine's cross-rank input check (one all-gather of
a digest), one all-reduce for the loss, and the weights' gradients all-reduced -- in one
collective for all of them, where hand-written code issues one per weight.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

HERE = os.path.dirname(os.path.abspath(__file__))
NPROC = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("comms")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={NPROC}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
           os.path.join(HERE, "_comm_worker.py"), str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 240 s:\n{(e.stderr or '')[-3000:]}")
    results = []
    for r in range(NPROC):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote nothing (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
        data = json.loads(path.read_text())
        assert "exception" not in data, f"rank {r} failed:\n{data['exception']}"
        results.append(data)
    return results


@pytest.mark.parametrize("case", ["batch", "batch_images", "hidden", "hidden_images"])
def test_full_loss_and_gradients_on_every_rank(ranks, case):
    for res in ranks:
        assert res[case]["err"] < 1e-10, res[case]
        if "types" in res[case]:
            assert res[case]["types"] == ["Tensor"] * 4   # full tensors, not DTensors


def test_data_parallel_step_collectives(ranks):
    # check + loss all-reduce + ONE all-reduce for both weight gradients
    for res in ranks:
        assert res["batch"]["comms"] == {"allgather_": 1, "all_reduce": 2}


def test_sharded_input_gradient_is_gathered_once(ranks):
    # the images' gradient is sharded like the images: one all-gather makes it full
    for res in ranks:
        assert res["batch_images"]["comms"] == {"allgather_": 1, "all_reduce": 2,
                                                "all_gather_into_tensor": 1}


def test_one_input_check_per_call(ranks):
    for res in ranks:
        for case in ("batch", "batch_images", "hidden", "hidden_images"):
            assert res[case]["comms"].get("allgather_") == 1, (case, res[case]["comms"])
