"""Data-parallel step time on 1, 2 and 4 ranks: named_axes xmap vs hand-written DTensor.

One step = the tutorial MLP loss and its gradients for a global batch, data parallel:
``xmap(named_loss, axis_resources={'batch': 'x'})`` inside ``nx.Mesh`` against the same
positional model written by hand with ``distribute_tensor(images, mesh, [Shard(0)])``,
replicated weights and ``full_tensor()`` gradients.  Each world size runs under
``torchrun`` (gloo, CPU, one thread per rank) on 127.0.0.1; rank 0 reports the median
step time and the collectives one step issues (DTensor's ``CommDebugMode``).

Like for like: both variants start from the same full inputs on every rank and end with
what the xmap call gives (SPEC §5): the full loss and the full gradients on every rank.
So the hand-written step also reads ``loss.full_tensor()``, and it builds its replicated
weights from the rank's own copy (``src_data_rank=None``, as the engine does) rather than
broadcasting them from rank 0.  The engine's one extra collective is its cross-rank input
check (an 8-byte all-gather per call); it all-reduces all weight gradients in one go.
A third row runs the xmap with ``Mesh(..., outputs='dtensor')`` and reads the full loss
after the backward, as the hand-written step does.  On 1 rank the xmap runs vectorized
(no DTensor: the mesh axis has size 1) while the hand-written step still goes through
DTensor, so that row measures DTensor's own overhead more than named_axes'.

    python benchmarks/bench_parallel.py                     # 1, 2 and 4 ranks: a table
    python benchmarks/bench_parallel.py --ranks 2 --profile  # + rank 0's torch.profiler
    from benchmarks.bench_parallel import main              # rows for benchmarks/run.py
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

SIZES = dict(batch=256, inputs=784, hidden=512, classes=10)
STEPS, WARMUP, ROUNDS = 20, 3, 2   # ROUNDS * STEPS timed steps per variant


def _comm_counts(fn) -> dict:
    """Collectives one call of ``fn`` issues, by op name (DTensor's CommDebugMode also
    sees plain ``torch.distributed`` calls such as the engine's input check)."""
    from torch.distributed.tensor.debug import CommDebugMode

    mode = CommDebugMode()
    with mode:
        fn()
    return {str(k).split(".")[-1]: int(v) for k, v in mode.get_comm_counts().items()}


def _profile(fn, steps: int = 10) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)


def _worker(out_path: str, profile: bool = False) -> None:
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
        return (loss, *torch.autograd.grad(loss, (w1, w2)))

    # The same call returning DTensors: the loss is made full after the backward, at the
    # point where the hand-written step reads it (full outputs must be full on return).
    mesh_dt = P.Mesh(np.array(P.devices()), ("x",), outputs="dtensor")

    def nx_step_dt():
        with mesh_dt:
            loss = step_nx(w1, w2, images, labels)
        grads = torch.autograd.grad(loss, (w1, w2))
        return (loss.full_tensor() if hasattr(loss, "full_tensor") else loss, *grads)

    dm = init_device_mesh("cpu", (n,), mesh_dim_names=("x",))

    def dtensor_step():
        a = distribute_tensor(w1.detach(), dm, [Replicate()], src_data_rank=None).requires_grad_()
        b = distribute_tensor(w2.detach(), dm, [Replicate()], src_data_rank=None).requires_grad_()
        x = distribute_tensor(images, dm, [Shard(0)], src_data_rank=None)
        y = distribute_tensor(labels, dm, [Shard(0)], src_data_rank=None)
        logits = torch.relu(x @ a) @ b
        preds = logits - torch.logsumexp(logits, 1, keepdim=True)
        targets = torch.nn.functional.one_hot(y, SIZES["classes"]).to(preds.dtype)
        loss = -(targets * preds).sum(1).mean()
        ga, gb = torch.autograd.grad(loss, (a, b))
        return loss.full_tensor(), ga.full_tensor(), gb.full_tensor()

    ref = dtensor_step()
    got = nx_step()
    err = max(float((p - q).abs().max()) for got in (got, nx_step_dt()) for p, q in zip(ref, got))
    variants = (("named_axes xmap", nx_step), ("named_axes xmap, outputs='dtensor'", nx_step_dt),
                ("hand-written DTensor", dtensor_step))
    comms = {name: _comm_counts(fn) for name, fn in variants}
    profiles = {name: _profile(fn) for name, fn in variants} if profile else {}
    for _ in range(WARMUP):
        for _, fn in variants:
            fn()
    # Steps interleaved (A B, B A, ...): on a shared machine the load drifts, and blocks of
    # one variant after the other would charge a busy spell to one variant only.
    wall: dict = {name: [] for name, _ in variants}
    cpu: dict = {name: [] for name, _ in variants}
    for i in range(STEPS * ROUNDS):
        for name, fn in (variants if i % 2 == 0 else variants[::-1]):  # same place on average
            dist.barrier()
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.thread_time() - c0)
    if dist.get_rank() == 0:
        med = lambda d: {k: 1e3 * statistics.median(v) for k, v in d.items()}  # noqa: E731
        with open(out_path, "w") as f:
            json.dump({"ranks": n, "max_grad_err": err, "threads": torch.get_num_threads(),
                       "median_ms": med(wall), "cpu_ms": med(cpu), "comms": comms,
                       "profiles": profiles}, f)
    dist.destroy_process_group()
    # Leave without running C++ static destructors: gloo's worker threads have been seen
    # to abort at interpreter exit ('terminate called without an active exception',
    # SIGABRT) after a clean destroy_process_group, failing a job that succeeded.
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(n: int, timeout: float = 600, profile: bool = False, tries: int = 2) -> dict:
    """One torchrun launch of ``n`` ranks; retried once (the free port we picked can be
    taken by another process before torchrun binds it)."""
    for attempt in range(tries):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
                   "--master-addr=127.0.0.1", f"--master-port={_port()}",
                   os.path.abspath(__file__), "--worker", out] + (["--profile"] if profile else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
            if os.path.exists(out):   # rank 0 finished (gloo can abort a rank at teardown)
                with open(out) as f:
                    return json.load(f)
    raise RuntimeError(f"torchrun --nproc-per-node={n} failed:\n{proc.stderr[-3000:]}")


def main(world_sizes=(1, 2, 4), profile: bool = False) -> list[dict]:
    """Rows: one per (ranks, variant) with the median step time, the ratio to DTensor and
    the collectives per step."""
    rows = []
    for n in world_sizes:
        r = run_world(n, profile=profile)
        for variant, text in r.get("profiles", {}).items():
            print(f"== rank 0 of {n}, {variant}: torch.profiler, 10 steps\n{text}")
        base = r["median_ms"]["hand-written DTensor"]
        for variant, ms in r["median_ms"].items():
            rows.append(dict(case=f"data-parallel step, {n} rank(s), batch {SIZES['batch']}",
                             ranks=n, variant=variant, median_ms=round(ms, 3),
                             ratio_to_dtensor=round(ms / base, 3),
                             cpu_ms=round(r["cpu_ms"][variant], 3),
                             collectives=_fmt_comms(r["comms"][variant]),
                             max_grad_err=r["max_grad_err"]))
    return rows


def _fmt_comms(counts: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"


def table(rows: list[dict]) -> str:
    lines = ["| ranks | variant | median step (ms) | ratio to DTensor | main-thread CPU (ms) "
             "| collectives per step |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['ranks']} | {r['variant']} | {r['median_ms']:.2f} | "
              f"{r['ratio_to_dtensor']:.2f} | {r['cpu_ms']:.2f} | {r['collectives']} |"
              for r in rows]
    return "\n".join(lines)


def _cli(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4", help="world sizes, comma-separated (1,2,4)")
    ap.add_argument("--profile", action="store_true",
                    help="also print rank 0's torch.profiler table per variant")
    args = ap.parse_args(argv)
    sizes = tuple(int(x) for x in args.ranks.split(",") if x.strip())
    print(table(main(sizes, profile=args.profile)))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], profile="--profile" in sys.argv[3:])
    else:
        _cli(sys.argv[1:])
