"""The DTensor engine communicates no more than hand-written DTensor code (2 gloo ranks).

A data-parallel step (every rank passes the full inputs, gets the full loss, and the full
gradients reach the inputs) needs: the engine's cross-rank input check (one all-gather of
a digest, on the first call with a given input structure), one all-reduce for the loss,
and the weights' gradients all-reduced -- in one collective for all of them, where
hand-written code issues one per weight.  The loss's cotangent needs none: the body runs
on each rank's shards, where ``psum`` transposes to an all-reduce of the cotangent, but
the cotangent handed to a full output is the same on every rank and the engine knows it
(as DTensor's placements do).
"""
from __future__ import annotations

import os

import pytest
from _ranks import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

HERE = os.path.dirname(os.path.abspath(__file__))
NPROC = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    pytest.importorskip("torch")
    return launch(os.path.join(HERE, "_comm_worker.py"), NPROC, tmp_path_factory.mktemp("comms"),
                  timeout=240)


@pytest.mark.parametrize("case", ["batch", "batch_images", "hidden", "hidden_images"])
def test_full_loss_and_gradients_on_every_rank(ranks, case):
    for res in ranks:
        assert res[case]["err"] < 1e-10, res[case]
        if "types" in res[case]:
            assert res[case]["types"] == ["Tensor"] * 4   # full tensors, not DTensors


def test_data_parallel_step_collectives(ranks):
    # check + loss all-reduce (forward only) + ONE all-reduce for both weight gradients
    for res in ranks:
        assert res["batch"]["comms"] == {"allgather_": 1, "all_reduce": 2}


def test_sharded_input_gradient_is_gathered_once(ranks):
    # the images' gradient is sharded like the images: one all-gather makes it full (no
    # input check: this input structure was checked by the first call)
    for res in ranks:
        assert res["batch_images"]["comms"] == {"all_reduce": 2, "all_gather_into_tensor": 1}


def test_one_input_check_per_input_structure(ranks):
    # every case passes the same input structure: only the first call checks it
    for res in ranks:
        assert res["batch"]["comms"].get("allgather_") == 1
        for case in ("batch_images", "hidden", "hidden_images"):
            assert res[case]["comms"].get("allgather_") is None, (case, res[case]["comms"])
