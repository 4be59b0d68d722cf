"""The hand-written baseline for examples/gpt_mesh.py on a 2x2 mesh: the same GPT in plain
torch modules, tensor-parallel with ``parallelize_module`` (``ColwiseParallel`` for the
query/key/value and MLP-up projections, ``RowwiseParallel`` for the attention output
and MLP-down ones, Megatron's layout) over ``mp``, and data-parallel over ``dp`` by an
all-reduce of the gradients in one bucket (a hand-written DDP), then ``torch.optim.Adam``
(``foreach=True``, as the named program: one dispatch per update op for all parameters).

    torchrun --nproc-per-node=4 benchmarks/tp_baseline.py --out r.json [gpt_mesh's flags]

Same sizes, batch, data order and step as the named program (``benchmarks/
bench_sharded.py`` runs both and prints the ratio); the weights are not the same draws,
so only the timing and the collectives are compared, not the losses.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "data" / "sonnets.txt"


class Block(nn.Module):
    def __init__(self, embed: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, embed // heads
        self.ln1, self.ln2 = nn.LayerNorm(embed), nn.LayerNorm(embed)
        self.wq, self.wk, self.wv = (nn.Linear(embed, embed, bias=False) for _ in range(3))
        self.wo = nn.Linear(embed, embed)
        self.up, self.down = nn.Linear(embed, mlp), nn.Linear(mlp, embed)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        # column-parallel outputs are this rank's heads: -1 infers the local head count
        q, k, v = (w(h).view(b, t, -1, self.hd).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v
        x = x + self.wo(att.transpose(1, 2).reshape(b, t, -1))
        return x + self.down(torch.relu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, embed: int, heads: int, mlp: int,
                 layers: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, embed), nn.Embedding(context, embed)
        self.blocks = nn.ModuleList(Block(embed, heads, mlp) for _ in range(layers))
        self.lnf, self.out = nn.LayerNorm(embed), nn.Linear(embed, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.out(self.lnf(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


TP_PLAN = {"wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(),
           "wo": RowwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("steps", 20), ("batch", 8), ("context", 32), ("embed", 64),
                          ("heads", 4), ("mlp", 512), ("layers", 2), ("seed", 0)):
        ap.add_argument(f"--{flag}", type=int, default=default)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "mp"))
    torch.manual_seed(args.seed)
    text = CORPUS.read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    model = GPT(len(chars), args.context, args.embed, args.heads, args.mlp, args.layers)
    model = model.to(getattr(torch, args.dtype))
    for block in model.blocks:
        parallelize_module(block, mesh["mp"], TP_PLAN)
    # foreach, as the named version: DTensor and plain parameters in separate groups (one
    # foreach call cannot mix them)
    params = list(model.parameters())
    opt = torch.optim.Adam([{"params": [p for p in params if isinstance(p, DTensor)]},
                            {"params": [p for p in params if not isinstance(p, DTensor)]}],
                           lr=args.lr, foreach=True)
    dp_group, dp = mesh["dp"].get_group(), mesh["dp"].size()
    rows = slice(mesh["dp"].get_local_rank() * (args.batch // dp),
                 (mesh["dp"].get_local_rank() + 1) * (args.batch // dp))
    gen = torch.Generator().manual_seed(args.seed)
    times, losses, comms = [], [], {}
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=gen)
        window = data[starts[rows, None] + torch.arange(args.context + 1)]
        t0 = time.perf_counter()
        counting = step == 1
        if counting:
            from torch.distributed.tensor.debug import CommDebugMode

            cdm = CommDebugMode()
            cdm.__enter__()
        loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad()
        loss.backward()
        # data parallel: average the gradients over dp in one bucket, as DDP does
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                 for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=dp_group)
        flat /= dp
        torch._foreach_copy_(grads, [f.view_as(g) for f, g in zip(flat.split([g.numel() for g in grads]), grads)])
        opt.step()
        if counting:
            cdm.__exit__(None, None, None)
            comms = {str(k).split(".")[-1]: int(v) for k, v in cdm.get_comm_counts().items()}
            comms["dp all_reduce (one bucket)"] = 1
        total = loss.detach().clone()
        dist.all_reduce(total, group=dp_group)
        losses.append(float(total) / dp)
        times.append(time.perf_counter() - t0)
    tail = sorted(times[2:] or times)
    result = {"mode": "hand-written TP+DP", "losses": losses,
              "step_time_s": tail[len(tail) // 2], "comms_per_step": comms}
    if args.out and rank == 0:
        Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
    if "LOCAL_RANK" in os.environ:   # a torchrun worker: leave without C++ static destructors
        # (gloo's worker threads have been seen to abort at interpreter exit, SIGABRT, after
        # a clean destroy_process_group, failing a run that succeeded)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
