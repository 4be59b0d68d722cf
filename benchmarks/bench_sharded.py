"""Sharded training figures for examples/gpt_mesh.py (issue 13): per-rank parameter +
Adam-state memory against the one-process run, collectives per step, step time against
a hand-written DTensor tensor-parallel version of the same model.

    python benchmarks/bench_sharded.py [--steps 12]     # launches torchrun (4 gloo ranks)

Runs the example twice -- one process (vectorized) and a 2x2 mesh of 4 processes
(``batch`` -> dp, ``heads``/``mlp`` -> mp) -- with its default model, then
``benchmarks/tp_baseline.py`` (the same model in plain modules, ``parallelize_module``
with Colwise/RowwiseParallel over mp, one bucketed gradient all-reduce over dp) on the
same mesh, and prints one table.  Memory is counted from the tensors each rank holds
(a DTensor's local shard); collectives are DTensor's CommDebugMode counts for one whole
step (forward, backward, Adam) on rank 0, after the first step; step time is the median
after two warm-up steps.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gpt_mesh.py"
BASELINE = ROOT / "benchmarks" / "tp_baseline.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list, nproc: int, timeout: float, script: Path = EXAMPLE) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        if nproc > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   "--master-addr=127.0.0.1", f"--master-port={_port()}", str(script)]
        else:
            cmd = [sys.executable, str(EXAMPLE), "--mode", "vectorized"]
        proc = subprocess.run(cmd + args + ["--quiet", "--out", str(out)], capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode or not out.exists():
            raise SystemExit(f"{' '.join(cmd)} failed (rc={proc.returncode}):\n"
                             f"{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args(argv)
    common = ["--steps", str(a.steps)]
    one = run(common, 1, a.timeout)
    mesh = run(common, 4, a.timeout)
    hand = run(common, 4, a.timeout, BASELINE)
    diff = max(abs(x - y) for x, y in zip(one["losses"], mesh["losses"]))
    lines = [f"gpt_mesh default model (2 layers, embed 64, mlp 512, batch 8 x 32), {a.steps} "
             f"steps, float32, gloo on this machine's cores", "",
             "| mode | params + Adam / rank | ratio to 1 process | step (s) | ratio to "
             "hand-written | collectives per step (rank 0) |", "|---|---|---|---|---|---|"]
    for name, r in (("1 process (vectorized)", one), ("named_axes, 2x2 mesh, 4 ranks", mesh)):
        b = r["param_bytes"] + r["opt_bytes"]
        lines.append(f"| {name} | {b / 1e6:.3f} MB | {r['memory_ratio']:.3f} | "
                     f"{r['step_time_s']:.3f} | {r['step_time_s'] / hand['step_time_s']:.2f} | "
                     f"{_comms(r['comms_per_step'])} |")
    lines.append(f"| hand-written DTensor TP (parallelize_module) + DP, 2x2 | (same shards) | | "
                 f"{hand['step_time_s']:.3f} | 1.00 | {_comms(hand['comms_per_step'])} |")
    lines += ["", f"Largest loss difference, 1 process vs mesh, over {a.steps} steps: "
              f"{diff:.2e} (the hand-written model draws its own weights)."]
    text = "\n".join(lines)
    print(text)
    return text


def _comms(c: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in c.items()) or "none"


if __name__ == "__main__":
    main()
