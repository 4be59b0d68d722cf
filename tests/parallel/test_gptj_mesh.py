"""The GPT-J port (examples/gptj/) on real gloo process groups: GPT-J's
``axis_resources={'shard': 'mp', 'batch': 'dp'}`` over ``('dp', 'mp')`` meshes of 1x2,
2x1 (2 ranks) and 2x2 (4 ranks), the DTensor engine.  Each rank runs the grads xmap and
two train steps on the mesh and vectorized (no resources) and writes the largest
relative difference; the vectorized port equals JAX's xmap (tests/test_gptj_port.py),
so these runs are held to the same 1e-5.  On 2x2 (GPT-J's mesh) 20 training steps on
fresh batches give the vectorized loss curve.

This file is also the rank worker: ``torchrun ... test_gptj_mesh.py OUT`` with the mesh
in ``NX_GPTJ_MESH``.
"""
from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.hunt   # minutes on 2 cores: make test-all runs it

HERE = os.path.dirname(os.path.abspath(__file__))
MESHES = {"1x2": 2, "2x1": 2, "2x2": 4}


@pytest.mark.distributed
@pytest.mark.timeout(1300)
@pytest.mark.parametrize("mesh", list(MESHES))
def test_gptj_port_on_a_dtensor_mesh(mesh, tmp_path, monkeypatch):
    from _ranks import launch

    monkeypatch.setenv("NX_GPTJ_MESH", mesh)
    ranks = launch(os.path.abspath(__file__), MESHES[mesh], tmp_path, timeout=1200)
    for r, res in enumerate(ranks):
        assert res["grads_err"] < 1e-5, (r, res)
        # two optimizer steps: the update divides by sqrt of the squared-gradient average,
        # so float32 rounding of tiny gradients shows at ~1e-4 of a leaf's largest entry
        assert res["train_err"] < 1e-3, (r, res)
    assert len({tuple(res["losses"]) for res in ranks}) == 1  # every rank: the same losses
    if mesh == "2x2":   # 20 steps, GPT-J's mesh: the vectorized loss curve
        import numpy as np

        for res in ranks:
            np.testing.assert_allclose(res["curve"], res["want_curve"], rtol=1e-4)


def _scenario(rank, results):
    import time

    import numpy as np
    import torch
    from torch.utils._pytree import tree_leaves

    import named_axes as nx

    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
    from gptj.config import CharCorpus, tiny_config
    from gptj.train import make_model

    torch.set_default_dtype(torch.float32)
    dp, mp = (int(s) for s in os.environ["NX_GPTJ_MESH"].split("x"))
    config = tiny_config()
    corpus = CharCorpus(n_vocab=config["n_vocab"])
    sample = corpus.batch(0, 1, 4, config["seq"])
    obs, tgt = sample["obs"].permute(1, 0, 2), sample["target"].permute(1, 0, 2)

    def rel(a, b):
        return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
                   for x, y in zip(tree_leaves(a), tree_leaves(b)) if y.is_floating_point())

    vec = make_model(config, mesh=False)
    want_grads = vec.grad_xmap(vec.state, obs, tgt)
    state, want_train = vec.state, []
    for step in range(2):
        *outs, state = vec.train_xmap(state, obs, tgt)
        want_train.append((outs, state["params"]))

    with nx.Mesh(np.array(nx.devices()).reshape(dp, mp), ("dp", "mp")):
        model = make_model(config, init=False)
        t = time.perf_counter()
        grads = model.grad_xmap(vec.state, obs, tgt)
        results["grads_first_s"] = time.perf_counter() - t
        results["grads_err"] = rel(grads, want_grads)
        state, errs, times, losses = vec.state, [], [], []
        for step in range(2):
            t = time.perf_counter()
            *outs, state = model.train_xmap(state, obs, tgt)
            times.append(time.perf_counter() - t)
            errs.append(rel((outs, state["params"]), want_train[step]))
            losses.append(float(outs[0].mean()))
    results["train_err"] = max(errs)
    results["train_step_s"] = times
    results["losses"] = losses
    if (dp, mp) == (2, 2):   # GPT-J's own mesh: a 20-step loss curve on fresh batches
        results["curve"], results["want_curve"] = _curves(vec, model, corpus, config, 20)


def _curves(vec, model, corpus, config, steps):
    import numpy as np

    import named_axes as nx

    want_state, state, want, got = vec.state, vec.state, [], []
    for step in range(steps):
        batch = corpus.batch(step, 1, 4, config["seq"])
        obs, tgt = batch["obs"].permute(1, 0, 2), batch["target"].permute(1, 0, 2)
        *outs, want_state = vec.train_xmap(want_state, obs, tgt)
        want.append(float(outs[0].mean()))
        with nx.Mesh(np.array(nx.devices()).reshape(2, 2), ("dp", "mp")):
            *outs, state = model.train_xmap(state, obs, tgt)
        got.append(float(outs[0].mean()))
    return got, want


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from _ranks import run_rank

    run_rank([_scenario])
