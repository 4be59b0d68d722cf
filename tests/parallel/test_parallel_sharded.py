"""Sharded named values as inputs and outputs (4 gloo ranks on 127.0.0.1, a 2x2 mesh).

One torchrun launch runs ``_sharded_worker.py``; the tests read what each rank wrote.
Also the one-process parts (NamedSharding, the counter-based generator) run here.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import named_axes as nx
from named_axes import parallel as P

HERE = os.path.dirname(os.path.abspath(__file__))
NPROC = 4


# -- one process ---------------------------------------------------------------------------
def test_counter_normal_shards_equal_slices_of_the_whole():
    full = P.counter_normal(3, (8, 6))
    for idx in [(slice(0, 4), slice(0, 6)), (slice(4, 8), slice(3, 6)), (slice(2, 3),)]:
        assert torch.equal(P.counter_normal(3, (8, 6), idx), full[idx])
    assert not torch.equal(full, P.counter_normal(4, (8, 6)))
    assert abs(float(full.mean())) < 0.5 and 0.6 < float(full.std()) < 1.4
    big = P.counter_normal(0, (200, 100))
    assert abs(float(big.mean())) < 0.02 and abs(float(big.std()) - 1) < 0.02
    u = P.counter_uniform(0, (1000,))
    assert 0 < float(u.min()) and float(u.max()) < 1


def test_named_sharding_specs_and_errors():
    m = nx.Mesh(np.array(nx.devices()).reshape(1, 1), ("dp", "mp"))
    s = nx.NamedSharding(m, {"batch": "dp", "heads": "mp"})
    assert s.dim_spec(2, names=("heads", None)) == (("mp",), ())
    assert s.index((4, 6), {"dp": 0, "mp": 0}, names=("batch", None)) == (slice(0, 4), slice(0, 6))
    with pytest.raises(ValueError, match="'z'"):
        nx.NamedSharding(m, {"batch": "z"})
    with pytest.raises(ValueError, match="same mesh axis 'dp'"):
        nx.NamedSharding(m, nx.PartitionSpec("dp", "dp")).dim_spec(2)
    with pytest.raises(ValueError, match="mesh order"):
        nx.NamedSharding(m, nx.PartitionSpec(("mp", "dp"))).dim_spec(1)
    # one process, one device: nothing to split
    x = torch.ones(4, 2)
    assert nx.device_put(x, s, axes=["batch", ...]) is x
    assert nx.make_array_from_process_local_data(None, x) is x


# -- four ranks ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from _ranks import launch

    return launch(os.path.join(HERE, "_sharded_worker.py"), NPROC,
                  tmp_path_factory.mktemp("sharded"), timeout=300)




@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_made_sharded_without_a_global_value(ranks):
    for res in ranks:
        got = res["making"]
        # w1 [inputs, hidden/mp], w2 [hidden/mp, classes], images [batch/dp, inputs], labels
        assert got["put_local"] == [[6, 4], [4, 3], [4, 6], [4]]
        assert got["put_placements"] == [["R", "S(1)"], ["R", "S(0)"], ["S(0)", "R"],
                                         ["S(0)", "R"]]
        assert got["pspec_local"] == [4, 3]
        assert got["pld_shape"] == [8, 6] and got["pld_local"] == [4, 6]
        assert got["cb_local"] == [6, 4]
        assert got["put_err"] == got["pld_err"] == got["cb_err"] == 0.0
        assert "axis 'batch'" in got["indivisible"] and "'dp': 2" in got["indivisible"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_sharded_training_matches_single_process(ranks):
    for res in ranks:
        got = res["training"]
        assert got["loss_err"] < 1e-12 and got["grad_err"] < 1e-12 and got["param_err"] < 1e-12
        assert got["loss_type"] == "DTensor" and got["loss_placements"] == ["R", "R"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_gradients_and_adam_state_sharded_like_the_parameters(ranks):
    for res in ranks:
        got = res["training"]
        assert got["grad_placements"] == got["param_placements"] == [["R", "S(1)"], ["R", "S(0)"]]
        assert got["grad_local"] == got["state_local"] == [[6, 4], [4, 3]]
        assert got["state_placements"] == got["param_placements"]
        for step in got["comms"]:
            # the weights' partial sums over dp: ONE flat all-reduce for both weights
            assert step["backward"].get("allreduce_") == 1, step
        summ = got["summary"]
        assert summ["gradient_reductions"] == 2 and summ["sharded_inputs"] == 8
        assert summ["redistributed_inputs"] == 0 and summ["distributed_inputs"] == 0


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_input_check_once_per_structure(ranks):
    for res in ranks:
        assert res["training"]["summary"]["input_checks"] == 1       # two steps, one check
        assert res["training"]["comms"][1]["forward"].get("allgather_") is None
        assert res["layouts"]["checks"] == 1     # 3 calls of a seen structure + 1 new one


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_layout_mismatch_redistributed_or_refused(ranks):
    for res in ranks:
        got = res["layouts"]
        assert got["redistributed"] == 1 and got["redistributed_loss_err"] < 1e-12
        assert got["redistributions"] == [["argument leaf 0 ('inputs', 'hidden')", "[S(0), R]",
                                           "[R, S(1)]"]]
        assert got["wrong_grad_placements"] == ["S(0)", "R"]   # the input's own layout
        msg = got["refused"]
        assert "argument leaf 0" in msg and "[S(0), R]" in msg and "[R, S(1)]" in msg


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_outputs_full_or_sharded(ranks):
    for res in ranks:
        got = res["layouts"]
        assert got["full_type"] == "Tensor"          # full in, full out: unchanged
        assert got["asked_full_type"] == "Tensor"    # Mesh(outputs='full')
        assert got["act_type"] == "DTensor" and got["act_placements"] == ["S(0)", "S(1)"]
        assert got["act_local"] == [4, 4] and got["act_err"] < 1e-12
