"""``pdot`` and ``psum``/``pmean`` on each rank's shards (parallel/_dtensor_local.py),
checked against plain torch on the full tensors over generated layouts, on a 2x2 mesh of 4
gloo ranks: values and both gradients, for every layout the local path accepts (the
others are left to DTensor)."""
from __future__ import annotations

import os

import pytest
from _ranks import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch(os.path.join(HERE, "_local_ops_worker.py"), 4,
                  tmp_path_factory.mktemp("local_ops"), timeout=360)


@pytest.mark.parametrize("op", ["einsum", "sum"])
def test_local_ops_match_plain_torch_on_full_tensors(ranks, op):
    for res in ranks:
        assert res[op]["err"] < 1e-10, res[op]
        assert res[op]["done"] >= 60, res[op]   # the generator reaches the local path


def test_second_derivatives_go_through_the_shards(ranks):
    for res in ranks:
        assert res["second_order_err"] < 1e-10, res["second_order_err"]


def test_forward_mode_ad_is_left_to_dtensor(ranks):
    for res in ranks:
        assert res["forward_ad_declined"] and res["outside_forward_ad"]


def test_out_placements():
    from torch.distributed.tensor import Partial, Replicate, Shard

    from named_axes.parallel._dtensor_local import out_placements

    col = out_placements("bk,kn->bn", (Shard(0), Replicate()), (Replicate(), Shard(1)))
    assert col == [Shard(0), Shard(1)]
    row = out_placements("bm,mn->bn", (Shard(0), Shard(1)), (Replicate(), Shard(0)))
    assert row == [Shard(0), Partial()]
    # a letter split in one operand and whole in the other: DTensor decides
    assert out_placements("bm,mn->bn", (Shard(0), Shard(1)), (Replicate(), Replicate())) is None
    # two letters on one mesh dim
    assert out_placements("bk,kn->bn", (Shard(0),), (Shard(1),)) is None
    # partial times replicated is partial; partial times partial is not bilinear-safe
    assert out_placements("bk,kn->bn", (Partial(),), (Replicate(),)) == [Partial()]
    assert out_placements("bk,kn->bn", (Partial(),), (Partial(),)) is None
