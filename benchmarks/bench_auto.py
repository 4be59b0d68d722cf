"""``axis_resources='auto'`` against every legal assignment, each measured (issue 33).

    python benchmarks/bench_auto.py [--programs gpt mlp p2] [--meshes 2x2 4x1]
                                    # launches torchrun: 4 gloo ranks on 127.0.0.1
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 .venv-xla/bin/python benchmarks/bench_auto.py \
        --engine xla [--programs mlp p2]   # one process, torch-xla's 4 CPU devices

For each program (the 2-layer GPT of examples/gpt_mesh.py, the xmap tutorial's MLP, the
P2 attention block of benchmarks/programs.py) and mesh, the 4 ranks calibrate
(``nx.calibrate``: their slowest figures), rank every legal assignment with the cost
model (``parallel._auto.rank``, what ``nx.plan_resources`` uses), then run each one's
training step (loss, ``.backward()``, SGD) and time it: the median of ``--steps`` steps
after two warm-up steps, each step's time the slowest rank's.  Printed per program and
mesh: the auto choice, its measured step against the fastest measured, the Spearman
rank correlation of modelled and measured times, and the table (``--table``).  The
GPT's parameters are DTensors laid out by each assignment (``nx.NamedSharding``), as
examples/gpt_mesh.py holds them (``--full``: full tensors); the MLP's and P2's are
full tensors that require grad.

``--engine xla``: the same in one process on torch-xla's SPMD engine (a mesh of its CPU
devices); every tensor lives on the XLA device (the parameters as leaves that require
grad, full tensors, resharded by the engine as each assignment says), a step is the
forward graph, then the backward and SGD graph (``torch_xla.sync``), waited for.  Steps
are warmed up until one compiles nothing (the parameters' shardings settle over the
first updates: up to four steps compile), then ``--steps`` are timed.  The rates are ``nx.calibrate()``'s, what an
``axis_resources='auto'`` xmap uses on that mesh too.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# -- the programs: (named loss as an xmap without resources, arguments) ----------------------
def gpt_program():
    import torch
    import named_axes as nx
    import gpt_mesh as G

    vocab = len(set(G.CORPUS.read_text()))
    specs = G.param_specs(vocab, embed=64, heads=4, mlp_size=512, layers=2, context=32)
    params = G.init_params(specs, 0, None, torch.float32)
    tokens = torch.randint(0, vocab, (8, 33), generator=torch.Generator().manual_seed(0))

    def loss_fn(p, t, y):
        return G.named_loss(p, t, y, 2)
    in_axes = (G.in_axes_of(specs), ["batch", "seq", ...], ["batch", "seq", ...])
    data = (tokens[:, :-1], tokens[:, 1:])

    def sharded(mesh, resources):   # the parameters as gpt_mesh.py holds them: DTensors
        return (G.init_params(specs, 0, nx.NamedSharding(mesh, resources), torch.float32),
                *data)
    return loss_fn, in_axes, (params, *data), sharded


def mlp_program():
    import torch
    import programs as P
    import named_axes as nx

    w1, w2, images, labels = P.p1_data(128, 784, 512, 10)
    return (P.p1_named_loss(nx), P.P1_IN_AXES,
            (w1.requires_grad_(), w2.requires_grad_(), images, labels), None)


def p2_program():
    import programs as P
    import named_axes as nx

    x, params = P.p2_data(batch=8, seq=64, heads=8, head_dim=32, model=256, ff=1024)
    ps = [params[k].requires_grad_() for k in P.P2_PARAMS]
    return P.p2_named_loss(nx), P.P2_IN_AXES, (x, x, *ps), None


PROGRAMS = {"gpt": gpt_program, "mlp": mlp_program, "p2": p2_program}


# -- the worker (one per rank, under torchrun) ----------------------------------------------
def _params(args) -> list:
    import torch

    leaves = []
    for a in args:
        vals = a.values() if isinstance(a, dict) else [a]
        leaves += [v for v in vals if isinstance(v, torch.Tensor) and v.requires_grad]
    return leaves


def _measure(loss, args, steps: int) -> float:
    import torch

    params = _params(args)

    def step():
        for p in params:
            p.grad = None
        value = loss(*args)
        value.backward()
        with torch.no_grad():
            for p in params:
                p -= 1e-3 * p.grad
    times = []
    for k in range(steps + 2):
        torch.distributed.barrier()
        t0 = time.perf_counter()
        step()
        t = torch.tensor([time.perf_counter() - t0])
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        if k >= 2:
            times.append(float(t))
    return statistics.median(times)


def _run_all(opts, rates, make_mesh, place, measure) -> dict:
    """Every program and mesh of ``opts``: the model's ranking and each assignment's
    measured step.  ``place(args)``: the arguments on the engine's device (or as they
    are); ``measure(loss, args, steps)``: a step's time."""
    import named_axes as nx
    from named_axes.parallel import _auto
    from named_axes.parallel._cost_trace import trace_costs

    out = {"rates": rates.__dict__, "runs": []}
    for prog in opts.programs:
        fun, in_axes, args, sharded = PROGRAMS[prog]()
        plain = nx.xmap(fun, in_axes=in_axes, out_axes=[...])
        for shape in opts.meshes:
            mesh = make_mesh(tuple(int(d) for d in shape.split("x")))
            shard = sharded if sharded is not None and not opts.full else None
            trace = trace_costs(plain, shard(mesh, {}) if shard else args)
            ranked = _auto.rank(trace, mesh.shape, rates, train=True)
            rows = []
            for c in ranked:
                loss = nx.xmap(fun, in_axes=in_axes, out_axes=[...],
                               axis_resources=c.axis_resources)
                try:
                    step_args = (shard(mesh, c.axis_resources) if shard and c.axis_resources
                                 else place(args))   # (no resources: no mesh, full tensors)
                    with mesh:
                        t = measure(loss, step_args, opts.steps)
                    err = None
                except Exception as e:   # an assignment the engines refuse: shown, not timed
                    t, err = None, f"{type(e).__name__}: {str(e)[:160]}"
                rows.append({"resources": c.spelled(), "model_s": c.time_s,
                             "measured_s": t, "error": err, "collectives": c.collectives,
                             "memory": c.memory_bytes})
            out["runs"].append({"program": prog, "mesh": shape, "rows": rows})
    return out


def worker(opts) -> None:
    from datetime import timedelta

    import numpy as np
    import torch

    import named_axes as nx

    sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", timeout=timedelta(seconds=300))
    out = _run_all(opts, nx.calibrate(),
                   lambda dims: nx.Mesh(np.array(nx.devices()).reshape(dims), ("dp", "mp")),
                   lambda args: args, _measure)
    if torch.distributed.get_rank() == 0:
        Path(opts.out).write_text(json.dumps(out))
    torch.distributed.destroy_process_group()
    # Leave without C++ static destructors: gloo's threads have aborted at interpreter
    # exit ('terminate called without an active exception') after a clean destroy, about
    # one run in eight, failing a bench that succeeded (as bench_parallel.py does).
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)


def xla_main(opts) -> dict:
    """``--engine xla``: every program and mesh in this process, on torch-xla's mesh."""
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    import named_axes as nx
    from named_axes.parallel._devices import ensure_spmd

    sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]
    ensure_spmd()
    devices = nx.devices("xla")
    if len(devices) < 4:
        raise SystemExit(f"--engine xla needs 4 XLA devices (PJRT_DEVICE=CPU "
                         f"CPU_NUM_DEVICES=4), got {len(devices)}")
    device = torch_xla.device()

    def place(args):
        def one(v):
            if not isinstance(v, torch.Tensor):
                return v
            moved = v.detach().to(device)
            return moved.requires_grad_() if v.requires_grad else moved
        return tuple({k: one(v) for k, v in a.items()} if isinstance(a, dict) else one(a)
                     for a in args)

    def compiles() -> int:
        data = met.metric_data("CompileTime")
        return data[0] if data else 0

    def measure(loss, args, steps: int) -> float:
        params = _params(args)

        def step() -> float:
            t0 = time.perf_counter()
            for p in params:
                p.grad = None
            loss(*args).backward()
            with torch.no_grad():
                for p in params:
                    p -= 1e-3 * p.grad
            torch_xla.sync()
            xm.wait_device_ops()
            return time.perf_counter() - t0
        for _ in range(10):   # warm up until a step compiles nothing (the parameters'
            before = compiles()   # shardings settle over the first updates)
            step()
            if compiles() == before:
                break
        return statistics.median(step() for _ in range(steps))

    return _run_all(opts, nx.calibrate(),
                    lambda dims: nx.Mesh(np.array(devices[:4]).reshape(dims), ("dp", "mp")),
                    place, measure)


# -- the launcher and the report ------------------------------------------------------------
def spearman(a: list, b: list) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for pos, i in enumerate(order):
            r[i] = pos
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    if n < 2:
        return float("nan")
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def report(result: dict, table: bool) -> str:
    lines = [f"rates: {result['rates']}"]
    for run in result["runs"]:
        rows = [r for r in run["rows"] if r["measured_s"] is not None]
        failed = [r for r in run["rows"] if r["measured_s"] is None]
        auto = run["rows"][0]
        best = min(rows, key=lambda r: r["measured_s"])
        rho = spearman([r["model_s"] for r in rows], [r["measured_s"] for r in rows])
        ratio = auto["measured_s"] / best["measured_s"] if auto["measured_s"] else float("nan")
        lines.append(f"{run['program']} on {run['mesh']}: auto {auto['resources']} measured "
                     f"{ratio:.3f}x the fastest ({best['resources']}); Spearman {rho:.2f} over "
                     f"{len(rows)} assignments; {len(failed)} refused")
        if table:
            for r in run["rows"]:
                m = f"{r['measured_s'] * 1e3:8.2f} ms" if r["measured_s"] else r["error"]
                lines.append(f"    {r['resources']:<44} model {r['model_s'] * 1e3:8.2f} ms  "
                             f"measured {m}")
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="+", default=["gpt", "mlp", "p2"])
    ap.add_argument("--meshes", nargs="+", default=["2x2", "4x1"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--full", action="store_true",
                    help="GPT's parameters as full tensors (default: DTensors laid out by "
                         "each assignment, as examples/gpt_mesh.py holds them)")
    ap.add_argument("--engine", choices=["gloo", "xla"], default="gloo",
                    help="gloo: 4 ranks under torchrun (DTensor engine); xla: this process "
                         "on torch-xla's SPMD engine (its 4 CPU devices)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        worker(opts)
        return ""
    if opts.engine == "xla":
        text = report(xla_main(opts), opts.table)
        print(text)
        return text
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
               "--master-addr=127.0.0.1", f"--master-port={port}", __file__, "--worker",
               "--out", str(out), "--steps", str(opts.steps), "--programs", *opts.programs,
               "--meshes", *opts.meshes] + (["--full"] if opts.full else [])
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode or not out.exists():
            raise SystemExit(f"bench_auto failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}"
                             f"\n{proc.stderr[-4000:]}")
        text = report(json.loads(out.read_text()), opts.table)
    print(text)
    return text


if __name__ == "__main__":
    main()
