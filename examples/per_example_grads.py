"""Per-example gradients with named axes, and what they are good for (clipped, DP-SGD-style training).

Inside ``xmap`` over ``batch`` the loss of one example is a scalar with named shape
``{'batch': n}``.  ``nx.grad`` of it gives one gradient per example (the gradients carry
``batch``); ``reduce_axes=('batch',)`` sums them instead, as ``jax.grad`` did.  With
per-example gradients in hand, clipping each example's gradient before averaging (the
core of differentially private SGD) is three lines.

    python examples/per_example_grads.py [--steps 200]
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

import named_axes as nx
from named_axes import lax

FEATURES, CLASSES = 20, 5


def example_loss(w, b, x, y):
    """x: (features,) {batch};  y: () {batch}  ->  () {batch}: one loss per example."""
    return F.cross_entropy(x @ w + b, y)


def per_example_grads(w, b, x, y):
    return nx.grad(example_loss, argnums=(0, 1))(w, b, x, y)                 # carry 'batch'


def summed_grads(w, b, x, y):
    return nx.grad(example_loss, argnums=(0, 1), reduce_axes=('batch',))(w, b, x, y)


def clipped_mean_grads(w, b, x, y, clip):
    gw, gb = nx.grad(example_loss, argnums=(0, 1))(w, b, x, y)               # () per example
    norm = torch.sqrt((gw ** 2).sum() + (gb ** 2).sum())                      # () {batch}
    scale = torch.clamp(clip / norm, max=1.0)                                 # shrink, never grow
    return lax.pmean(gw * scale, 'batch'), lax.pmean(gb * scale, 'batch'), norm


data_axes = ([...], [...], ['batch', ...], ['batch', ...])
per_example = nx.xmap(per_example_grads, in_axes=data_axes,
                      out_axes=(['batch', ...], ['batch', ...]))
summed = nx.xmap(summed_grads, in_axes=data_axes, out_axes=([...], [...]))
clipped = nx.xmap(clipped_mean_grads, in_axes=(*data_axes, [...]),   # clip: a Python float passes through
                  out_axes=([...], [...], ['batch', ...]))
batch_loss = nx.xmap(lambda w, b, x, y: lax.pmean(example_loss(w, b, x, y), 'batch'),
                     in_axes=data_axes, out_axes=[...])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=int(os.environ.get("NX_EXAMPLE_STEPS", 200)))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=0.5, help="Gaussian noise, times clip / batch")
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    centres = torch.randn(CLASSES, FEATURES, generator=gen)
    ys = torch.randint(0, CLASSES, (4096,), generator=gen)
    xs = centres[ys] + 1.5 * torch.randn(4096, FEATURES, generator=gen)
    w = torch.zeros(FEATURES, CLASSES)
    b = torch.zeros(CLASSES)

    # 1. per-example gradients equal a Python loop of torch.autograd over single examples
    x, y = xs[:8], ys[:8]
    w0 = torch.randn(FEATURES, CLASSES, generator=gen)
    gw, gb = per_example(w0, b, x, y)
    loop = []
    for i in range(8):
        wi, bi = w0.clone().requires_grad_(), b.clone().requires_grad_()
        loop.append(torch.autograd.grad(F.cross_entropy(x[i] @ wi + bi, y[i]), (wi, bi)))
    same = (torch.allclose(gw, torch.stack([g[0] for g in loop]), atol=1e-6)
            and torch.allclose(gb, torch.stack([g[1] for g in loop]), atol=1e-6))
    print(f"per-example gradients {tuple(gw.shape)}, {tuple(gb.shape)}; "
          f"per-example gradients match a loop over examples: {same}")
    sw, sb = summed(w0, b, x, y)
    print(f"reduce_axes=('batch',) gives their sum: "
          f"{torch.allclose(sw, gw.sum(0), atol=1e-5) and torch.allclose(sb, gb.sum(0), atol=1e-5)}")

    # 2. train with per-example clipping plus noise (the recipe of DP-SGD)
    history, start = [], time.perf_counter()
    bar = tqdm(range(args.steps), desc="clipped SGD", unit="step", mininterval=0.5)
    for step in bar:
        idx = torch.randint(0, len(xs), (args.batch,), generator=gen)
        gw, gb, norms = clipped(w, b, xs[idx], ys[idx], args.clip)
        sigma = args.noise * args.clip / args.batch
        w = w - args.lr * (gw + sigma * torch.randn(gw.shape, generator=gen))
        b = b - args.lr * (gb + sigma * torch.randn(gb.shape, generator=gen))
        history.append(batch_loss(w, b, xs[idx], ys[idx]).item())
        if step % max(1, args.steps // 5) == 0 or step == args.steps - 1:
            tqdm.write(f"step {step:4d}  loss {history[-1]:.4f}  per-example grad norms: "
                       f"median {norms.median():.2f}, max {norms.max():.2f}, "
                       f"clipped {(norms > args.clip).float().mean():.0%}")
    bar.close()
    accuracy = ((xs @ w + b).argmax(-1) == ys).float().mean().item()
    print(f"loss {history[0]:.4f} -> {sum(history[-10:]) / len(history[-10:]):.4f} "
          f"(mean of the last 10 steps) in {args.steps} steps, {time.perf_counter() - start:.1f} s; "
          f"accuracy {accuracy:.1%}")
    return {"history": history, "accuracy": accuracy}


if __name__ == "__main__":
    main()
