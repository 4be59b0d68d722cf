"""Two pieces of nx.jit's CPU performance, checked by behaviour: scalars computed once
per step (transforms/_scalar_pass.py: Adam's bias corrections were recomputed per
element) and freed step buffers kept in glibc's heap (transforms/_heap.py: each step
faulted its new buffers' pages in)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import named_axes as nx
from named_axes.transforms._scalar_pass import LOOP, RealizeScalars


def adam_step(p, g, m, v, t):
    t = t + 1
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    bc1, bc2 = 1 - 0.9 ** t, 1 - 0.999 ** t
    return p - (1e-3 / bc1) * m / (v.sqrt() / bc2.sqrt() + 1e-8), m, v, t


def test_pass_marks_scalars_feeding_large_loops_only():
    big = [torch.randn(LOOP) for _ in range(4)] + [torch.zeros(())]
    gm = make_fx(adam_step, tracing_mode="fake")(*big)
    RealizeScalars()(gm.graph)
    marked = [n for n in gm.graph.nodes if n.meta.get("inductor_realize_to_strides")]
    assert marked and all(n.meta["val"].numel() == 1 for n in marked)
    small = [torch.randn(8) for _ in range(4)] + [torch.zeros(())]
    gm = make_fx(adam_step, tracing_mode="fake")(*small)
    RealizeScalars()(gm.graph)
    assert not any(n.meta.get("inductor_realize_to_strides") for n in gm.graph.nodes)
    assert RealizeScalars().uuid() == RealizeScalars().uuid()   # inductor's cache key part


def test_compiled_adam_steps_match_eager():
    g = torch.Generator().manual_seed(0)
    p, m, v = torch.randn(LOOP, generator=g), torch.zeros(LOOP), torch.zeros(LOOP)
    state, ref = (p, m, v, torch.zeros(())), (p, m, v, torch.zeros(()))
    f = nx.jit(adam_step)
    for _ in range(3):
        grad = torch.randn(LOOP, generator=g)
        state = f(state[0], grad, *state[1:])
        ref = adam_step(ref[0], grad, *ref[1:])
        for a, b in zip(state, ref):
            torch.testing.assert_close(a, b)


CHURN = textwrap.dedent("""
    import json, os, resource, sys
    import torch
    import named_axes as nx
    from named_axes.transforms import _heap

    def faults_per_step(steps):
        held = [torch.empty(1 << 19) for _ in range(3)]   # 2 MiB each, like a step's state
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(steps):
            grad = torch.empty(1 << 19).fill_(1.0)
            held = [torch.empty(1 << 19).copy_(h).add_(grad) for h in held]
            del grad
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps

    nx.jit(lambda x: x * 2)(torch.ones(3))   # the first CPU compile tunes the heap
    faults_per_step(20)                       # the heap grows to the working set
    print(json.dumps({"tuned": _heap.tune_heap(), "faults": faults_per_step(100)}))
""")


def _churn(env: dict) -> dict:
    import json

    from named_axes.transforms._heap import _USER_VARS

    base = {k: v for k, v in os.environ.items()
            if k not in _USER_VARS and k != "NAMED_AXES_HEAP_TUNING"}
    res = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True,
                         timeout=300, env={**base, **env})
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_heap_tuning_keeps_step_buffers_resident_and_yields_to_the_user():
    out = _churn({})
    assert out["tuned"] is True
    assert out["faults"] < 16, out          # steady state: no page faulted in per step
    assert _churn({"NAMED_AXES_HEAP_TUNING": "0"})["tuned"] is False
    assert _churn({"MALLOC_TRIM_THRESHOLD_": "131072"})["tuned"] is False
