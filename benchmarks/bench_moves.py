"""The collectives that move values along a split axis, on 4 gloo ranks (issue 32): time
per call (forward + backward) of each program of the local-shard tests' collective
matmuls on the local-shard path (the only one since the op-by-op DTensor path went), and
of the vectorized program in one process.

    python benchmarks/bench_moves.py [--calls 20]     # launches torchrun (4 gloo ranks)

Each program runs on a 1-d mesh of the 4 ranks (``{'i': 'x'}``); inputs are those of
``tests/parallel/_local_shards_worker.py``'s ``moves`` scenario, both requiring grad: once
full on every rank, once with ``x`` as sharded state (``nx.device_put`` with the plan's
``NamedSharding``), as a training step holds its parameters.  The figure is rank 0's
median per call after two warm-up calls; 4 ranks share this machine's cores, so compare
ratios in one run, not times across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "tests" / "parallel"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _per_call(fn, calls: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rank_main(out: str, calls: int) -> None:
    """In each rank: time every program; rank 0 writes the figures."""
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(WORKERS))
    import named_axes as nx
    from named_axes import parallel as P
    from _local_shards_worker import _moves  # noqa: E402 - the tests' programs

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    mesh = P.Mesh(np.array(P.devices()), ("x",))
    rows = {}
    for name, f, in_axes, out_axes in _moves():
        shape = (8, 2, 8, 3) if len(in_axes[0]) == 3 else (8, 8, 3)
        x = torch.randn(*shape, requires_grad=True)
        # the same input as sharded state: a parameter laid out as the plan wants
        xs = nx.device_put([x.detach()], nx.NamedSharding(mesh, {"i": "x"}),
                           axes=[in_axes[0]])[0].requires_grad_()

        def step(res, x):
            g = nx.xmap(f, in_axes=in_axes, out_axes=out_axes, axis_resources=res)

            def call():
                total = g(x, w).sum()
                total = total.full_tensor() if type(total).__name__ == "DTensor" else total
                return torch.autograd.grad(total, (x, w))
            return call

        row = {"vectorized": _per_call(step({}, x), calls)}
        for label, arg in (("local", x), ("local sharded", xs)):
            try:
                with mesh:
                    row[label] = _per_call(step({"i": "x"}, arg), calls)
            except Exception as e:  # noqa: BLE001 - the table shows it
                row[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
        rows[name] = row
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.rank:
        rank_main(a.out, a.calls)
        # leave without C++ static destructors: gloo's threads have aborted the exit of a
        # rank that finished ('terminate called without an active exception'), as in
        # tests/parallel/_ranks.py
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
               "--master-addr=127.0.0.1", f"--master-port={_port()}", __file__, "--rank",
               "--out", str(out), "--calls", str(a.calls)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode or not out.exists():
            raise SystemExit(f"torchrun failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
        rows = json.loads(out.read_text())
    lines = ["| program | vectorized (1 process) | local-shard path | local / vectorized | "
             "local, sharded input |", "|---|---|---|---|---|"]
    def cell(t):
        return f"{t * 1e3:.2f} ms" if isinstance(t, float) else t

    for name, r in rows.items():
        vec, local = r["vectorized"], r["local"]
        ratio = f"{local / vec:.1f}x" if all(isinstance(t, float) for t in (local, vec)) else "-"
        lines.append(f"| {name} | {cell(vec)} | {cell(local)} | {ratio} | "
                     f"{cell(r['local sharded'])} |")
    table = "\n".join(lines)
    print(table)
    return table


if __name__ == "__main__":
    main()
