"""The GPT-J port (examples/gptj/) on torch-xla: GPT-J's
``axis_resources={'shard': 'mp', 'batch': 'dp'}`` over a 2x2 ``('dp', 'mp')`` mesh of
4 virtual CPU devices (run by ``make test-xla``).  The grads xmap equals the vectorized
port (which equals JAX's xmap, tests/test_gptj_port.py) to 1e-5, and 20 training steps
give the vectorized loss curve.  ``hk.remat`` (``nx.checkpoint``) runs on XLA tensors
here, its recomputation on autograd's XLA thread.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves

from _xla_env import xla_dump_dir  # noqa: F401,E402  (sets PJRT/XLA_FLAGS first)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from gptj.config import CharCorpus, tiny_config  # noqa: E402
from gptj.train import make_model  # noqa: E402

STEPS = 20


def rel(a, b) -> float:
    return max(float((x.cpu() - y).abs().max() / y.abs().max().clamp_min(1e-30))
               for x, y in zip(tree_leaves(a), tree_leaves(b)) if y.is_floating_point())


def compile_seconds() -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return data[1] / 1e9 if data else 0.0


@pytest.mark.timeout(900)
def test_gptj_port_on_a_2x2_xla_mesh():
    devices = nx.devices("xla")
    if len(devices) < 4:
        pytest.skip(f"needs 4 XLA devices (CPU_NUM_DEVICES=4), got {len(devices)}")
    config = tiny_config()
    corpus = CharCorpus(n_vocab=config["n_vocab"])
    sample = corpus.batch(0, 1, 4, config["seq"])
    obs, tgt = sample["obs"].permute(1, 0, 2), sample["target"].permute(1, 0, 2)
    torch.manual_seed(0)
    vec = make_model(config, mesh=False)
    want_grads = vec.grad_xmap(vec.state, obs, tgt)

    with nx.Mesh(np.array(devices[:4]).reshape(2, 2), ("dp", "mp")):
        model = make_model(config, init=False)
        compiled, t = compile_seconds(), time.perf_counter()
        grads = model.grad_xmap(vec.state, obs, tgt)
        first = (time.perf_counter() - t, compile_seconds() - compiled)
        assert rel(grads, want_grads) < 1e-5
        assert all(g.device.type == "cpu" for g in tree_leaves(grads))  # back where inputs were

        want_state, state, want, got, times = vec.state, vec.state, [], [], []
        for step in range(STEPS):
            batch = corpus.batch(step, 1, 4, config["seq"])
            o, t_ = batch["obs"].permute(1, 0, 2), batch["target"].permute(1, 0, 2)
            *outs, want_state = vec.train_xmap(want_state, o, t_)
            want.append(float(outs[0].mean()))
            t = time.perf_counter()
            *outs, state = model.train_xmap(state, o, t_)
            got.append(float(outs[0].mean()))
            times.append(time.perf_counter() - t)
    print(f"xla 2x2: grads first call {first[0]:.1f} s ({first[1]:.1f} s in XLA's compiler); "
          f"train step first {times[0]:.1f} s, then median {np.median(times[1:]):.2f} s")
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert rel(state["params"], want_state["params"]) < 1e-3   # see test_gptj_mesh.py
