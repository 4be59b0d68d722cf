"""A small GPT-style decoder written with named axes, trained tensor- and data-parallel.

Every value carries named axes (``batch``, ``seq``, ``heads``, ``mlp``, ``embed``,
``vocab``); the model never mentions devices.  Where the axes live is decided by
``axis_resources`` only:

    torchrun --nproc-per-node=4 examples/gpt_mesh.py   # 2x2 mesh: batch->dp, heads/mlp->mp
    python examples/gpt_mesh.py                        # one process, vectorized
    python examples/gpt_mesh.py --mode serial          # one process, batch in 2 serial chunks
    torchrun --nproc-per-node=4 examples/gpt_mesh.py --jit   # each rank's step compiled
    torchrun --nproc-per-node=4 examples/gpt_mesh.py --compile   # torch.compile of the step

On the mesh the parameters are made shard by shard (a counter-based generator, so they
equal the one-process init), each rank loads only its rows of the batch, the gradients
come back sharded like the parameters, and Adam updates local shards (its state is
sharded too).  The loss curves of the three modes agree to float rounding.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

import named_axes as nx
from named_axes import lax
from named_axes import parallel as P

CORPUS = Path(__file__).resolve().parent / "data" / "sonnets.txt"
RESOURCES = {"batch": "dp", "heads": "mp", "mlp": "mp"}


# -- the model: one token's view, every axis named --------------------------------------
def layer_norm(x, g, b, eps=1e-5):
    mu = nx.mean(x, "embed")
    var = nx.mean((x - mu) ** 2, "embed")
    return (x - mu) / torch.sqrt(var + eps) * g + b


def attention(x, p):
    """x: () {batch, seq, embed} -> () {batch, seq, embed}; heads split over mp."""
    q, k, v = (lax.pdot(x, p[w], "embed") for w in ("wq", "wk", "wv"))  # (hd,) {.., heads}
    keys, values = lax.all_gather(k, "seq"), lax.all_gather(v, "seq")  # (seq, hd) {batch, heads}
    scores = keys @ q / math.sqrt(q.shape[-1])                          # (seq,) {batch, seq, heads}
    future = torch.arange(scores.shape[-1]) > lax.axis_index("seq")
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    out = weights @ values                                              # (hd,) {batch, seq, heads}
    return lax.pdot(out, p["wo"], "heads", pos_contract=((0,), (0,))) + p["bo"]


def mlp(x, p):
    h = torch.relu(lax.pdot(x, p["up"], "embed") + p["b_up"])            # {batch, seq, mlp}
    return lax.pdot(h, p["down"], "mlp") + p["b_down"]                   # {batch, seq, embed}


def named_loss(params, tokens, targets, layers):
    vocab = lax.psum(1, "vocab")
    x = lax.pdot(nx.one_hot(tokens, vocab, dim="vocab", dtype=params["wte"].dtype),
                 params["wte"], "vocab") + params["wpe"]                 # {batch, seq, embed}
    for i in range(layers):
        p = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"h{i}.")}
        x = x + attention(layer_norm(x, p["ln1_g"], p["ln1_b"]), p)
        x = x + mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p)
    logits = lax.pdot(layer_norm(x, params["lnf_g"], params["lnf_b"]), params["w_out"], "embed")
    target = lax.psum(nx.one_hot(targets, vocab, dim="vocab", dtype=logits.dtype) * logits, "vocab")
    return lax.pmean(nx.logsumexp(logits, "vocab") - target, ("batch", "seq"))


# -- parameters: shapes, the name of each dim, init ----------------------------------------
def param_specs(vocab, *, embed, heads, mlp_size, layers, context):
    """name -> (shape, per-dim axis names (None: positional), init std or 'ones'/'zeros')."""
    hd = embed // heads
    s = {"wte": ((vocab, embed), ("vocab", "embed"), 0.1),
         "wpe": ((context, embed), ("seq", "embed"), 0.02),
         "lnf_g": ((embed,), ("embed",), "ones"), "lnf_b": ((embed,), ("embed",), "zeros"),
         "w_out": ((embed, vocab), ("embed", "vocab"), 1 / math.sqrt(embed))}
    for i in range(layers):
        for w in ("wq", "wk", "wv"):
            s[f"h{i}.{w}"] = ((embed, heads, hd), ("embed", "heads", None), 1 / math.sqrt(embed))
        s[f"h{i}.wo"] = ((heads, hd, embed), ("heads", None, "embed"),
                         1 / math.sqrt(embed * 2 * layers))
        s[f"h{i}.bo"] = ((embed,), ("embed",), "zeros")
        s[f"h{i}.up"] = ((embed, mlp_size), ("embed", "mlp"), 1 / math.sqrt(embed))
        s[f"h{i}.b_up"] = ((mlp_size,), ("mlp",), "zeros")
        s[f"h{i}.down"] = ((mlp_size, embed), ("mlp", "embed"),
                           1 / math.sqrt(mlp_size * 2 * layers))
        s[f"h{i}.b_down"] = ((embed,), ("embed",), "zeros")
        for ln in ("ln1", "ln2"):
            s[f"h{i}.{ln}_g"] = ((embed,), ("embed",), "ones")
            s[f"h{i}.{ln}_b"] = ((embed,), ("embed",), "zeros")
    return s


def in_axes_of(specs):
    return {k: {d: n for d, n in enumerate(names) if n is not None}
            for k, (_, names, _) in specs.items()}


def init_params(specs, seed, sharding, dtype):
    """Each parameter made shard by shard from a counter-based generator: on a mesh every
    rank computes only its shard, and the values equal the one-process init."""
    params = {}
    for k, (name, (shape, names, std)) in enumerate(specs.items()):
        def shard(idx, shape=shape, std=std, k=k):
            n = tuple(len(range(*sl.indices(d))) for sl, d in zip(idx, shape))
            if std == "ones":
                return torch.ones(n, dtype=dtype)
            if std == "zeros":
                return torch.zeros(n, dtype=dtype)
            return P.counter_normal(seed * 1000 + k, shape, idx, dtype=dtype) * std
        params[name] = nx.make_array_from_callback(shape, sharding, shard,
                                                   names=names).requires_grad_()
    return params


# -- running -------------------------------------------------------------------------------
def local_bytes(tensors):
    """Bytes this rank holds for ``tensors`` (a DTensor counts its local shard)."""
    out = 0
    for t in tensors:
        t = t.to_local() if type(t).__name__ == "DTensor" else t
        out += t.numel() * t.element_size()
    return out


def global_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)   # DTensor numel is global


def optimizer_tensors(opt):
    return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["auto", "vectorized", "serial", "mesh"], default="auto",
                    help="auto: mesh under torchrun (4 processes), else vectorized")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--jit", action="store_true",
                    help="compile the loss and its gradients with nx.jit (on a mesh: each "
                         "rank's program, its collectives in the graph)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the loss and its backward (on a mesh the loss call "
                         "runs as its nx.jit program: each rank's forward and backward "
                         "compiled, their collectives in the graphs)")
    ap.add_argument("--out", default=None, help="write the results as JSON here (rank 0)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    mode = args.mode if args.mode != "auto" else ("mesh" if distributed else "vectorized")
    if mode == "mesh" and not torch.distributed.is_initialized():
        from datetime import timedelta

        torch.distributed.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = nx.process_index()

    text = CORPUS.read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    specs = param_specs(len(chars), embed=args.embed, heads=args.heads, mlp_size=args.mlp,
                        layers=args.layers, context=args.context)
    mesh, sharding, resources = None, None, {}
    if mode == "mesh":
        n = nx.device_count()
        mesh = nx.Mesh(np.array(nx.devices()).reshape(2, n // 2), ("dp", "mp"))
        sharding = nx.NamedSharding(mesh, RESOURCES)
        resources = RESOURCES
    elif mode == "serial":
        resources = {"batch": nx.SerialLoop(2)}
    params = init_params(specs, args.seed, sharding, dtype)

    def loss_fn(params, tokens, targets):
        return named_loss(params, tokens, targets, args.layers)

    loss = nx.xmap(loss_fn, in_axes=(in_axes_of(specs), ["batch", "seq", ...], ["batch", "seq", ...]),
                   out_axes=[...], axis_resources=resources)
    # jit: forward and backward traced into one compiled program; its gradients come
    # back laid out like the parameters (sharded on a mesh), Adam runs outside it
    grads_of = nx.jit(nx.value_and_grad(loss)) if args.jit else None
    # the same program run op by op (backend='eager'), for the step whose collectives are
    # counted: CommDebugMode does not see inside inductor's compiled code
    counted_of = nx.jit(nx.value_and_grad(loss), backend="eager") if args.jit else None
    # torch.compile: dynamo compiles the step around the loss call, which (on a mesh) runs
    # as nx.jit's program -- compiled as a forward and a backward program

    def forward_backward(params, tokens, targets):
        value = loss(params, tokens, targets)
        value.backward()
        return value

    compiled_step = torch.compile(forward_backward) if args.compile else None
    # foreach: one DTensor dispatch per update op for all parameters, not one per parameter
    # (torch's CPU default is the per-parameter loop)
    opt = torch.optim.Adam(list(params.values()), lr=args.lr, foreach=True)
    gen = torch.Generator().manual_seed(args.seed)
    history, comms, times = [], {}, []
    for step in range(args.steps):
        # the same global sample on every rank (B ints); each rank builds only its rows
        starts = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=gen)
        rows = (sharding.local_index((args.batch, args.context + 1), names=("batch", None))[0]
                if sharding is not None else slice(None))
        window = data[starts[rows, None] + torch.arange(args.context + 1)]
        tokens, targets = nx.make_array_from_process_local_data(
            sharding, (window[:, :-1], window[:, 1:]), axes=["batch", ...])
        t0 = time.perf_counter()
        counting = mode == "mesh" and step == 1
        if counting:
            from torch.distributed.tensor.debug import CommDebugMode

            if counted_of is not None:   # traced first: the count is of one run
                with mesh:
                    counted_of(params, tokens, targets)
            elif compiled_step is not None:   # the eager twin's first call checks inputs
                with mesh:
                    loss(params, tokens, targets)

            cdm = CommDebugMode()
            cdm.__enter__()
        with mesh if mesh is not None else contextlib.nullcontext():
            if grads_of is not None:
                value, grads = (counted_of if counting else grads_of)(params, tokens, targets)
                for k, p in params.items():
                    p.grad = grads[k]
            elif compiled_step is not None and not counting:
                opt.zero_grad()
                value = compiled_step(params, tokens, targets)
            else:
                opt.zero_grad()
                value = loss(params, tokens, targets)
                value.backward()
        opt.step()
        if counting:
            cdm.__exit__(None, None, None)
            comms = {str(k).split(".")[-1]: int(v) for k, v in cdm.get_comm_counts().items()}
        history.append(float(nx.device_get(value.detach())))
        times.append(time.perf_counter() - t0)
        if rank == 0 and not args.quiet:
            print(f"step {step:3d}  loss {history[-1]:.6f}")

    state = optimizer_tensors(opt)
    pl, pg = local_bytes(params.values()), global_bytes(params.values())
    sl, sg = local_bytes(state), global_bytes(state)
    grads_local = [list((p.grad.to_local() if type(p.grad).__name__ == "DTensor" else p.grad).shape)
                   for p in params.values()]
    result = {
        "mode": mode, "jit": grads_of.stats() if grads_of else None,
        # eager runs of the mesh engine (under --compile: only while the loss is traced)
        "engine_runs": P.comm_summary()["local_shard_runs"],
        "losses": history, "comms_per_step": comms,
        "step_time_s": sorted(times[2:] or times)[len(times[2:] or times) // 2],
        "param_bytes": pl, "param_bytes_single": pg, "opt_bytes": sl, "opt_bytes_single": sg,
        "memory_ratio": (pl + sl) / (pg + sg),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "placements": {k: P.sharding_of(v) for k, v in params.items()},
        "grad_local_shapes": dict(zip(params, grads_local)),
        "param_local_shapes": {k: list((v.to_local() if type(v).__name__ == "DTensor" else v).shape)
                               for k, v in params.items()},
    }
    if rank == 0 and not args.quiet:
        print(f"{mode}: loss {history[0]:.4f} -> {history[-1]:.4f}; parameters + Adam state "
              f"{(pl + sl) / 1e6:.3f} MB on this rank vs {(pg + sg) / 1e6:.3f} MB in one "
              f"process ({result['memory_ratio']:.3f}x)")
        if comms:
            print(f"collectives per step (forward + backward + Adam): {comms}")
    if args.out and rank == 0:
        Path(args.out).write_text(json.dumps(result))
    if mode == "mesh" and args.mode == "auto":
        torch.distributed.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
    if "LOCAL_RANK" in os.environ:   # a torchrun worker: leave without C++ static destructors
        # (gloo's worker threads have been seen to abort at interpreter exit, SIGABRT, after
        # a clean destroy_process_group, failing a run that succeeded)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
