"""Sharded training figures for examples/gpt_mesh.py (issue 13): per-rank parameter +
Adam-state memory against the one-process run, collectives per step, step time.

    python benchmarks/bench_sharded.py [--steps 6]      # launches torchrun (4 gloo ranks)

Runs the example twice -- one process (vectorized) and a 2x2 mesh of 4 processes
(``batch`` -> dp, ``heads``/``mlp`` -> mp) -- with its default model, and prints one
table.  Memory is counted from the tensors each rank holds (a DTensor's local shard);
collectives are DTensor's CommDebugMode counts for one whole step (forward, backward,
Adam) on rank 0, after the first step.
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


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list, nproc: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        if nproc > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   "--master-addr=127.0.0.1", f"--master-port={_port()}", str(EXAMPLE)]
        else:
            cmd = [sys.executable, str(EXAMPLE), "--mode", "vectorized"]
        proc = subprocess.run(cmd + args + ["--quiet", "--out", str(out)], capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode or not out.exists():
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args(argv)
    common = ["--steps", str(a.steps)]
    one = run(common, 1, a.timeout)
    mesh = run(common, 4, a.timeout)
    diff = max(abs(x - y) for x, y in zip(one["losses"], mesh["losses"]))
    print(f"gpt_mesh default model, {a.steps} steps, float32")
    print(f"{'mode':<28}{'params+Adam / rank':>20}{'ratio':>8}{'step s':>9}{'maxrss MB':>11}")
    for name, r in (("1 process (vectorized)", one), ("2x2 mesh, 4 gloo ranks", mesh)):
        b = r["param_bytes"] + r["opt_bytes"]
        print(f"{name:<28}{b / 1e6:>17.3f} MB{r['memory_ratio']:>8.3f}"
              f"{r['step_time_s']:>9.3f}{r['maxrss_mb']:>11.0f}")
    print(f"max |loss difference| over {a.steps} steps: {diff:.2e}")
    print(f"collectives per step on the mesh (rank 0): {mesh['comms_per_step']} "
          f"(total {sum(mesh['comms_per_step'].values())})")
    return {"one": one, "mesh": mesh}


if __name__ == "__main__":
    main()
