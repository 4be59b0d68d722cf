"""How long ``nx.plan_resources`` takes for GPT-J's training step on an 8-device mesh
(issue 33: under 1 s).

    python benchmarks/bench_plan.py [--repeat 5]

GPT-J's step of examples/gptj (named axes ``shard`` and ``batch``, the optimizer inside
the xmap, ``tiny_config``) priced on a 2x2x2 mesh with fixed rates (nothing is run on a
mesh, so one process suffices).  Printed: the median wall time of ``--repeat`` calls
after one warm-up call, split into the abstract trace and the ranking of the
candidates, and how many candidates were priced.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gptj_on_eight_devices():
    """``(GPT-J's training xmap, its arguments, a 2x2x2 mesh)`` (``tiny_config``)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import numpy as np
    import torch

    import named_axes as nx
    from gptj.config import CharCorpus, tiny_config
    from gptj.train import make_model

    config = tiny_config()
    torch.manual_seed(0)
    model = make_model(config, mesh=False)
    sample = CharCorpus(n_vocab=config["n_vocab"]).batch(0, 1, 8, config["seq"])
    args = (model.state, sample["obs"].permute(1, 0, 2), sample["target"].permute(1, 0, 2))
    return model.train_xmap, args, nx.Mesh(np.arange(8).reshape(2, 2, 2), ("x", "y", "z"))


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    opts = ap.parse_args(argv)
    train_xmap, args, mesh = gptj_on_eight_devices()
    import named_axes as nx
    from named_axes.parallel import _auto

    rates = nx.Rates(flops_per_s=1e11, bytes_per_s=1e10, op_s=2e-5, link_bytes_per_s=1e9,
                     link_latency_s=1e-4)
    plan = nx.plan_resources(train_xmap, mesh, *args, rates=rates)   # warm-up
    whole, traced, ranked = [], [], []
    for _ in range(opts.repeat):
        t0 = time.perf_counter()
        nx.plan_resources(train_xmap, mesh, *args, rates=rates)
        t1 = time.perf_counter()
        trace = _auto.trace_costs(train_xmap, args, differentiate=None)
        t2 = time.perf_counter()
        train = any(g for _, _, g in trace.inputs)   # (plan_resources' default)
        found = _auto.rank(trace, mesh.shape, rates, train=train)
        t3 = time.perf_counter()
        whole.append(t1 - t0)
        traced.append(t2 - t1)
        ranked.append(t3 - t2)
    med = statistics.median
    text = (f"plan_resources, GPT-J (tiny_config) on a 2x2x2 mesh: {med(whole):.3f} s "
            f"(median of {opts.repeat}; trace {med(traced):.3f} s, ranking "
            f"{len(found)} candidates {med(ranked) * 1e3:.1f} ms); chosen "
            f"{plan.spelled()}")
    print(text)
    return text


if __name__ == "__main__":
    main()
