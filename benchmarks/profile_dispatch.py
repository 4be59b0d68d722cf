"""Profile the named_axes dispatcher on the per-op-bound programs (cProfile).

    .venv/bin/python benchmarks/profile_dispatch.py [--program p3|p1|ops] [--n 2000] [--top 30]

Prints the top functions by own time and by cumulative time. Findings go to
benchmarks/PROFILE.md.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import torch  # noqa: E402

import programs  # noqa: E402


def workload(name: str):
    import named_axes as nx

    if name == "p3":
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        f = nx.xmap(programs.p3_chain, in_axes=["a", "b", ...], out_axes=["a", "b", ...])
        return lambda: f(x, y)
    if name == "p1":
        w1, w2, images, labels = programs.p1_data(8, 16, 16, 4)
        params = (w1.clone().requires_grad_(), w2.clone().requires_grad_())
        f = nx.xmap(programs.p1_named_loss(nx), in_axes=programs.P1_IN_AXES, out_axes=[...])
        return programs._grad_step(f, params, images, labels)
    if name == "ops":   # one named binary op outside xmap
        x = nx.named(torch.randn(8, 16), {0: "a", 1: "b"})
        y = nx.named(torch.randn(8, 16), {0: "a", 1: "b"})
        return lambda: x + y
    raise SystemExit(f"unknown program {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", default="p3")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    step = workload(a.program)
    for _ in range(20):
        step()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(a.n):
        step()
    pr.disable()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).strip_dirs().sort_stats(key).print_stats(a.top)
        print(s.getvalue())


if __name__ == "__main__":
    main()
