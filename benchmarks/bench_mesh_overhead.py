"""Per-call overhead of a mesh call (issue 32): a training step of the P2 attention block
(loss, gradients of its ``nn.Parameter``s, an SGD step), ``batch`` split over a 1-D mesh of
4 gloo ranks, against the same step on the same xmap run without resources on one rank's
share of the batch, in the same process.

    python benchmarks/bench_mesh_overhead.py [--steps 30]     # launches torchrun (4 ranks)

The mesh call also communicates -- the loss's ``pmean`` forward and one flat gradient
all-reduce backward (``CommDebugMode`` counts them).  Both steps run under torch's CPU
profiler, and the time the rank's main thread spends inside the collectives (issuing
them and waiting for the other ranks: the union of the intervals of their ops) is
communication, reported apart; the ratio without it is the path's own cost: slicing the
inputs, the engine's bookkeeping, the edges' Functions.  (Timing the collectives alone,
on the same buffers, missed the waits for slower ranks, which on a machine with fewer
cores than ranks are most of it.)  Steps are interleaved (mesh, share, ...) and each
figure is a median.
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

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))


_COLLECTIVES = ("_c10d_functional::all_reduce", "_c10d_functional::wait_tensor",
                "c10d::allreduce_")


def _in_collectives(events) -> float:
    """Seconds the main thread spent inside collective ops: the union of their intervals
    (a functional all-reduce holds the c10d one; the wait holds the time the other ranks
    took to arrive)."""
    main = {e.thread for e in events if e.name == "aten::mm"}
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.name in _COLLECTIVES and e.thread in main)
    total, cur = 0.0, None
    for a, b in spans:
        if cur is None or a > cur[1]:
            total += 0.0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    total += 0.0 if cur is None else cur[1] - cur[0]
    return total / 1e6   # (the profiler's clock is in microseconds)


def _rank(steps: int, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.profiler import ProfilerActivity, profile

    import named_axes as nx
    from programs import P2_IN_AXES, P2_PARAMS, p2_data, p2_named_loss

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, p = p2_data()
    def model():   # each step its own parameters: the share's update differs per rank
        params = [torch.nn.Parameter(p[k].clone()) for k in P2_PARAMS]
        return params, torch.optim.SGD(params, lr=1e-4)

    (mesh_params, mesh_opt), (share_params, share_opt) = model(), model()
    share = x.shape[0] // world
    mine = x[rank * share:(rank + 1) * share]
    mesh_f = nx.xmap(p2_named_loss(nx), in_axes=P2_IN_AXES, out_axes=[...],
                     axis_resources={"batch": "x"})
    share_f = nx.xmap(p2_named_loss(nx), in_axes=P2_IN_AXES, out_axes=[...])
    mesh = nx.Mesh(np.array(nx.devices()), ("x",))

    def step(loss, opt):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def on_mesh():
        with mesh:
            step(mesh_f(x, x, *mesh_params), mesh_opt)

    def on_share():
        step(share_f(mine, mine, *share_params), share_opt)

    mode = CommDebugMode()
    on_mesh()
    with mode:
        on_mesh()
    counts = {str(k).split(".")[-1]: int(v) for k, v in mode.get_comm_counts().items()}
    times: dict = {"mesh": [], "share": [], "comms": []}
    for _ in range(2):
        on_mesh(), on_share()
    for _ in range(steps):
        for name, fn in (("mesh", on_mesh), ("share", on_share)):
            dist.barrier()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
            if name == "mesh":
                times["comms"].append(_in_collectives(prof.events()))
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        med["own"] = statistics.median(a - c for a, c in zip(times["mesh"], times["comms"]))
        with open(out, "w") as f:
            json.dump({"median_s": med, "collectives": counts}, f)
    dist.destroy_process_group()


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
               "--master-addr=127.0.0.1", f"--master-port={port}", __file__,
               "--rank-worker", str(a.steps), out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode or not os.path.exists(out):
            raise SystemExit(f"torchrun failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
        got = json.loads(Path(out).read_text())
    m = got["median_s"]
    own = m["own"]
    lines = [
        "P2 attention block (batch 8 x seq 128, 8 heads x 32, model 256, ff 1024), a training "
        f"step on nn.Parameters (loss, backward, SGD), 4 gloo ranks, median of {a.steps} "
        "interleaved steps, each under torch's CPU profiler:",
        "",
        "| call | time (ms) | ratio to the share |",
        "|---|---|---|",
        f"| xmap on one rank's share (batch 2), no resources | {m['share'] * 1e3:.2f} | 1.00 |",
        f"| xmap, batch over a 4-rank mesh | {m['mesh'] * 1e3:.2f} | "
        f"{m['mesh'] / m['share']:.2f} |",
        f"| of which inside its collectives ({got['collectives']}) | {m['comms'] * 1e3:.2f} | |",
        f"| the mesh call without them | {own * 1e3:.2f} | {own / m['share']:.2f} |",
        "",
        f"Target (issue 32): per-call overhead excluding communication <= 1.3x: "
        f"{'meets' if own / m['share'] <= 1.3 else 'MISSES'} ({own / m['share']:.2f}).",
    ]
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-worker":
        _rank(int(sys.argv[2]), sys.argv[3])
    else:
        main()
