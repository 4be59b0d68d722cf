"""Data-parallel step time on 1, 2 and 4 ranks: named_axes xmap vs hand-written DTensor.

One step = the tutorial MLP loss and its gradients for a global batch, data parallel:
``xmap(named_loss, axis_resources={'batch': 'x'})`` inside ``nx.Mesh`` against the same
positional model written by hand with ``distribute_tensor(images, mesh, [Shard(0)])``,
replicated weights and ``full_tensor()`` gradients.  Each world size runs under
``torchrun`` (gloo, CPU) on 127.0.0.1; rank 0 reports the median step time.

    python benchmarks/bench_parallel.py            # prints a table
    from benchmarks.bench_parallel import main     # rows for benchmarks/run.py
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = dict(batch=256, inputs=784, hidden=512, classes=10)
STEPS, WARMUP = 20, 3


def _worker(out_path: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import named_axes as nx
    from named_axes import parallel as P
    from data_parallel import IN_AXES, named_loss

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(SIZES["inputs"], SIZES["hidden"], generator=g) / 28).requires_grad_()
    w2 = (torch.randn(SIZES["hidden"], SIZES["classes"], generator=g) / 22).requires_grad_()
    images = torch.randn(SIZES["batch"], SIZES["inputs"], generator=g)
    labels = torch.randint(0, SIZES["classes"], (SIZES["batch"],), generator=g)

    step_nx = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources={"batch": "x"})
    mesh = P.Mesh(np.array(P.devices()), ("x",))

    def nx_step():
        with mesh:
            loss = step_nx(w1, w2, images, labels)
        return torch.autograd.grad(loss, (w1, w2))

    dm = init_device_mesh("cpu", (n,), mesh_dim_names=("x",))

    def dtensor_step():
        a = distribute_tensor(w1.detach(), dm, [Replicate()]).requires_grad_()
        b = distribute_tensor(w2.detach(), dm, [Replicate()]).requires_grad_()
        x = distribute_tensor(images, dm, [Shard(0)], src_data_rank=None)
        y = distribute_tensor(labels, dm, [Shard(0)], src_data_rank=None)
        logits = torch.relu(x @ a) @ b
        preds = logits - torch.logsumexp(logits, 1, keepdim=True)
        targets = torch.nn.functional.one_hot(y, SIZES["classes"]).to(preds.dtype)
        loss = -(targets * preds).sum(1).mean()
        ga, gb = torch.autograd.grad(loss, (a, b))
        return ga.full_tensor(), gb.full_tensor()

    ref = dtensor_step()
    got = nx_step()
    err = max(float((p - q).abs().max()) for p, q in zip(ref, got))
    times = {}
    for name, fn in (("named_axes xmap", nx_step), ("hand-written DTensor", dtensor_step)) * 2:
        for _ in range(WARMUP):
            fn()
        ts = []
        for _ in range(STEPS):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        times.setdefault(name, []).extend(ts)
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({"ranks": n, "max_grad_err": err,
                       "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()}}, f)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(n: int, timeout: float = 600) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
               "--master-addr=127.0.0.1", f"--master-port={_port()}",
               os.path.abspath(__file__), "--worker", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"torchrun --nproc-per-node={n} failed:\n{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def main(world_sizes=(1, 2, 4)) -> list[dict]:
    """Rows: one per (ranks, variant) with the median step time and the ratio to DTensor."""
    rows = []
    for n in world_sizes:
        r = run_world(n)
        base = r["median_ms"]["hand-written DTensor"]
        for variant, ms in r["median_ms"].items():
            rows.append(dict(case=f"data-parallel step, {n} rank(s), batch {SIZES['batch']}",
                             ranks=n, variant=variant, median_ms=round(ms, 3),
                             ratio_to_dtensor=round(ms / base, 3),
                             max_grad_err=r["max_grad_err"]))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| ranks | variant | median step (ms) | ratio to DTensor |", "|---|---|---|---|"]
    lines += [f"| {r['ranks']} | {r['variant']} | {r['median_ms']:.2f} | {r['ratio_to_dtensor']:.2f} |"
              for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    else:
        print(table(main()))
