"""``axis_resources='auto'`` on 4 gloo auto_ranks (a 2x2 mesh, examples/gpt_mesh.py's GPT): the
auto_ranks calibrate together and choose alike, and the chosen step -- and the one a memory
budget forces, Megatron's layout -- equal the one-process run
(tests/parallel/_auto_worker.py)."""
from __future__ import annotations

import os

import pytest

from _ranks import launch

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]


@pytest.fixture(scope="session")   # (once per worker, however the tests are ordered)
def auto_ranks(tmp_path_factory):
    return launch(os.path.join(HERE, "_auto_worker.py"), 4, tmp_path_factory.mktemp("auto"),
                  timeout=300)


def test_every_rank_chooses_alike(auto_ranks):
    assert len({r["chosen"] for r in auto_ranks}) == 1
    assert len({r["forced"] for r in auto_ranks}) == 1


def test_auto_step_equals_the_vectorized_one(auto_ranks):
    for r in auto_ranks:
        assert r["loss_err"] < 1e-10 and r["grad_err"] < 1e-10, r


def test_a_budget_forces_megatron_and_the_step_still_matches(auto_ranks):
    for r in auto_ranks:
        assert r["forced"] == r["megatron"] and r["forced_err"] < 1e-10, r
        assert "fits memory_per_device" in r["too_small"], r


def test_the_model_counts_the_steps_collectives_with_sharded_parameters(auto_ranks):
    for r in auto_ranks:
        assert (r["modelled"], r["counted"]) == (10, 10), r   # (both shown on a failure)
