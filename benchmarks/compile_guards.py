"""Where ``torch.compile(xmap(f))`` spends the time its compiled twin does not (issue 29).

    .venv/bin/python benchmarks/compile_guards.py [--calls 1000] 2>/dev/null   # (guard logs on stderr)

For P1 small's loss and P3's chain, forward only, one thread: the time per call of
``torch.compile`` of the named program and of its hand-written positional twin, then the
same with dynamo's guard evaluation skipped (``torch.compiler.set_stance(
skip_guard_eval_unsafe=True)``, which is only safe because nothing changes between the
calls here), and the number of guards each compiled frame checks.  Inductor compiles both
programs to the same kernels; the difference left is guard evaluation on the library's
Python that dynamo traced.  Findings go to benchmarks/PROFILE.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import torch  # noqa: E402

import programs as P  # noqa: E402


def _per_call(fn, args, calls: int) -> float:
    for _ in range(20):
        fn(*args)
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def _guards(fn, args) -> int:
    """Guards dynamo installs for ``fn`` (its one frame), counted from its guard log."""
    import logging

    lines: list = []

    class Count(logging.Handler):
        def emit(self, record):
            lines.extend(line for line in record.getMessage().splitlines() if "+-" in line)

    torch._dynamo.reset()
    torch._logging.set_logs(guards=True)
    handler = Count()
    logging.getLogger("torch._dynamo.guards").addHandler(handler)
    try:
        torch.compile(fn)(*args)
    finally:
        logging.getLogger("torch._dynamo.guards").removeHandler(handler)
        torch._logging.set_logs()
    return len(lines)


def programs():
    import named_axes as nx

    w1, w2, images, labels = P.p1_data(8, 16, 32, 4)
    named = nx.xmap(P.p1_named_loss(nx), in_axes=P.P1_IN_AXES, out_axes=[...])
    yield "p1_small", named, P.p1_loss, (w1, w2, images, labels)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    chain = nx.xmap(P.p3_chain, in_axes=[["a", "b", ...]] * 2, out_axes=["a", "b", ...])
    yield "p3_chain", chain, P.p3_chain, (x, y)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("| program | variant | per call (µs) | guards skipped (µs) | guard tree lines |")
    print("|---|---|---|---|---|")
    for name, named, twin, args in programs():
        for label, fn in (("torch.compile(xmap)", named), ("torch.compile(twin)", twin)):
            n = _guards(fn, args)
            torch._dynamo.reset()
            c = torch.compile(fn)
            t = _per_call(c, args, a.calls)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                t0 = _per_call(c, args, a.calls)
            print(f"| {name} | {label} | {t:.1f} | {t0:.1f} | {n} |")


if __name__ == "__main__":
    main()
