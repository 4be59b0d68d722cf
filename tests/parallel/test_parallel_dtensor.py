"""Real 4-rank gloo process groups on 127.0.0.1 (torchrun), bounded by timeouts.

One torchrun launch runs every scenario (``_dist_worker.py``); the tests below read
what each rank wrote: the tutorial loss and gradients under the tutorial's three
strategies equal the single-process result, each value is really split (its local
shard shape on every rank), and the named collectives really communicate (DTensor's
CommDebugMode counts the all-reduces).
"""
from __future__ import annotations

import os

import pytest
from _ranks import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]

HERE = os.path.dirname(os.path.abspath(__file__))
NPROC = 4


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    pytest.importorskip("torch")
    return launch(os.path.join(HERE, "_dist_worker.py"), NPROC, tmp_path_factory.mktemp("dist"),
                  timeout=300)


STRATEGIES = {
    # strategy: expected local shapes per rank (mesh 4 or 2x2), checked on every rank
    "batch": {"w1": [12, 8], "w2": [8, 4], "images": [2, 12], "labels": [2], "hidden_act": [2, 8]},
    "hidden": {"w1": [12, 2], "w2": [2, 4], "images": [8, 12], "labels": [8], "hidden_act": [8, 2]},
    "batch_hidden": {"w1": [12, 4], "w2": [4, 4], "images": [4, 12], "labels": [4],
                     "hidden_act": [4, 4]},
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_tutorial_loss_and_grads_equal_single_process(ranks, strategy):
    for r, res in enumerate(ranks):
        got = res[strategy]
        assert got["err"] < 1e-10, (r, got)
        assert got["out_type"] == "Tensor"  # full tensors by default
    assert len({res[strategy]["loss"] for res in ranks}) == 1


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_values_are_really_split(ranks, strategy):
    for res in ranks:
        shapes = {k: v[0] for k, v in res[strategy]["shapes"].items()}
        assert shapes == STRATEGIES[strategy]
    # the body ran on each rank's own shards: plain tensors, no DTensor
    kinds = {k: v[1] for k, v in ranks[0][strategy]["shapes"].items()}
    assert set(map(tuple, kinds.values())) == {("plain",)}, kinds


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_collectives_communicate(ranks, strategy):
    comms = ranks[0][strategy]["comms"]
    assert comms.get("c10d_functional.all_reduce", 0) >= 1, comms


def test_psum_over_split_axis_sums_every_rank(ranks):
    for res in ranks:
        assert res["psum_axis_index"]["value"] == sum(range(8))
        assert res["psum_axis_index"]["comms"].get("c10d_functional.all_reduce", 0) >= 1
        assert res["pmax"]["value"] == [7.0, 7.0]


def test_pmap_over_ranks(ranks):
    for res in ranks:
        assert res["pmap"]["value"] == [i - 3.5 for i in range(8)]


def test_dtensor_outputs_on_request(ranks):
    for res in ranks:
        assert res["dtensor_out"] == {"type": "DTensor", "local": [2, 3]}


def test_serial_loop_composes_with_mesh(ranks):
    for res in ranks:
        assert res["serial_and_mesh"]["err"] < 1e-10


def test_one_axis_on_the_mesh_and_a_loop(ranks):
    """``{'batch': ('x', SerialLoop(2))}``: the loop's chunks, each split over the ranks;
    loss, gradients, axis_index and psum as in one process."""
    for res in ranks:
        assert res["mesh_and_loop_one_axis"]["err"] < 1e-10
        assert res["mesh_and_loop_one_axis"]["index_err"] == 0.0


def test_conflict_raised_on_every_rank(ranks):
    for res in ranks:
        msg = res["conflict"]["error"]
        assert msg is not None and "'a'" in msg and "'b'" in msg and "'x'" in msg


def test_inplace_into_a_plain_tensor_of_a_gathered_value(ranks):
    """``acc += all_gather(x)`` with ``acc`` made in the program (DTensor alone raises a
    bare AssertionError): the value and its gradient as in one process."""
    for r in ranks:
        res = r["inplace_plain"]
        assert res["value"] == float(sum(v * v for v in range(24)))
        assert res["grad_err"] == 0.0
