"""Train the tiny GPT-J port on ``examples/data/sonnets.txt`` (character level).

    python examples/gptj/train.py --steps 20                    # vectorized, 1 process
    python examples/gptj/train.py --steps 20 --serial batch     # batch as SerialLoop(2)
    python examples/gptj/train.py --steps 20 --serial shard     # shard as SerialLoop(2)
    python examples/gptj/train.py --steps 20 --jit              # every xmap under nx.jit
    torchrun --nproc-per-node=4 examples/gptj/train.py --mesh 2x2   # DTensor, gloo

The model runs with GPT-J's ``axis_resources={'shard': 'mp', 'batch': 'dp'}`` on a
``('dp', 'mp')`` mesh of all processes (``--mesh DPxMP``; one process: a 1x1 mesh, so
everything runs vectorized), or with ``--serial AXIS`` (that axis a ``SerialLoop(2)``,
no mesh).  Prints each step's loss, the first step's time (plan building, and compiling
under ``--jit``) and the mean time of the later steps, then a sample from
``generate_xmap``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # import gptj as a package

import named_axes as nx  # noqa: E402
from gptj.config import CharCorpus, tiny_config  # noqa: E402
from gptj.optim import make_optimizer  # noqa: E402
from gptj.sampling import softmax_sample  # noqa: E402
from gptj.transformer_shard import MESH_RESOURCES, CausalTransformer  # noqa: E402


def make_model(config, serial=None, jit=False, init=True, mesh=True):
    """The port for ``config`` with GPT-J's resources (``mesh``; call it inside a
    ``('dp', 'mp')`` mesh), or ``serial`` (an axis name) as ``SerialLoop(2)``, or neither
    (vectorized); ``jit``: every xmap under ``nx.jit``."""
    resources = ({serial: nx.SerialLoop(2)} if serial else MESH_RESOURCES if mesh else None)
    config = dict(config, optimizer=make_optimizer(config), sampler=softmax_sample)
    return CausalTransformer(config, axis_resources=resources, jit=jit, init=init)


def mesh_for(spec: str | None):
    devices = np.array(nx.devices())
    if spec is None:
        return nx.Mesh(devices.reshape(1, -1)[:, :1] if len(devices) == 1 else
                       devices.reshape(len(devices), 1), ('dp', 'mp'))
    dp, mp = (int(s) for s in spec.split("x"))
    return nx.Mesh(devices[:dp * mp].reshape(dp, mp), ('dp', 'mp'))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train the tiny GPT-J port on the sonnets.")
    ap.add_argument("--steps", type=int, default=int(os.environ.get("NX_EXAMPLE_STEPS", 20)))
    ap.add_argument("--serial", choices=["batch", "shard"], default=None)
    ap.add_argument("--mesh", default=None, help="DPxMP over the torchrun ranks (e.g. 2x2)")
    ap.add_argument("--jit", action="store_true", help="wrap each xmap in nx.jit")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--gas", type=int, default=1, help="gradient accumulation steps")
    ap.add_argument("--sample", type=int, default=32, help="characters to sample (0: none)")
    args = ap.parse_args(argv)

    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    say = print if nx.process_index() == 0 else (lambda *a, **k: None)
    torch.manual_seed(0)

    config = tiny_config(per_replica_batch=args.batch, gradient_accumulation_steps=args.gas)
    corpus = CharCorpus(n_vocab=config["n_vocab"])
    mesh = mesh_for(args.mesh) if args.serial is None else None
    with mesh if mesh is not None else _nothing():
        model = make_model(config, args.serial, args.jit)
        mode = f"serial {args.serial}" if args.serial else \
            f"mesh {dict(zip(mesh.axis_names, mesh.devices.shape))}"
        say(f"GPT-J port: {config['layers']} layers, d_model {config['d_model']}, "
            f"{config['n_heads']} heads, {config['cores_per_replica']} shards; {mode}"
            f"{', nx.jit' if args.jit else ''}")
        times, losses = [], []
        for step in range(args.steps):
            sample = corpus.batch(step, args.gas, args.batch, config["seq"])
            t = time.perf_counter()
            loss, last_loss, grad_norm, _ = model.train(sample)
            times.append(time.perf_counter() - t)
            losses.append(float(loss))
            say(f"step {step:3d}  loss {float(loss):.4f}  last_loss {float(last_loss):.4f}  "
                f"grad_norm {float(grad_norm):.4f}  {times[-1] * 1e3:.0f} ms")
        later = times[1:] or times
        say(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; first step {times[0]:.2f} s, "
            f"later steps {1e3 * sum(later) / len(later):.1f} ms each")
        if args.sample:
            prompts = ["Shall I compare thee to a", "When in disgrace with for"]
            ctx = torch.stack([corpus.encode(p)[-config["seq"]:] for p in prompts])
            (_, _), (tokens, _) = model.generate(ctx, [ctx.shape[1]] * len(prompts), args.sample,
                                                 {"temp": torch.full((len(prompts),), 0.5)})
            for p, t in zip(prompts, tokens):
                say(f"sample: {p!r} -> {corpus.decode(t.reshape(-1))!r}")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
