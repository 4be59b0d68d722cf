"""The xmap tutorial's named network, trained: ``make demo``.

A two-layer classifier written with named axes (``inputs``, ``hidden``, ``classes``,
``batch``) instead of positions, exactly as in the tutorial, and trained with plain SGD
on a synthetic task the script makes itself: points drawn around one of ten Gaussian
centres, labelled by their centre.  Runs on one CPU process in a few seconds.

    python examples/tutorial_mlp.py [--steps 300] [--seed 0]
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from tqdm import tqdm

import named_axes as nx
from named_axes import lax

INPUTS, HIDDEN, CLASSES = 64, 128, 10


# -- the model, with names instead of positions (the tutorial, line by line) -------------
def named_predict(w1, w2, image):
    hidden = torch.relu(lax.pdot(image, w1, 'inputs'))
    logits = lax.pdot(hidden, w2, 'hidden')
    return logits - nx.logsumexp(logits, 'classes')


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = lax.psum(1, 'classes')
    targets = nx.one_hot(labels, num_classes, dim='classes')
    losses = lax.psum(targets * predictions, 'classes')
    return -lax.pmean(losses, 'batch')


in_axes = [['inputs', 'hidden', ...],
           ['hidden', 'classes', ...],
           ['batch', 'inputs', ...],
           ['batch', ...]]
loss = nx.xmap(named_loss, in_axes=in_axes, out_axes=[...])
predict = nx.xmap(named_predict, in_axes=in_axes[:3], out_axes=['batch', 'classes', ...])


# -- the same network, positionally, to check the named one against ---------------------
def positional_loss(w1, w2, images, labels):
    logits = torch.relu(images @ w1) @ w2
    predictions = logits - logits.logsumexp(1, keepdim=True)
    targets = torch.nn.functional.one_hot(labels, predictions.shape[-1])
    return -(targets * predictions).sum(1).mean(0)


# -- data: ten overlapping Gaussian blobs in 64 dimensions ------------------------------------------
def make_data(n: int, centres: torch.Tensor, gen: torch.Generator):
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    images = centres[labels] + torch.randn(n, INPUTS, generator=gen)
    return images, labels


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(os.environ.get("NX_EXAMPLE_STEPS", 300)))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    centres = torch.randn(CLASSES, INPUTS, generator=gen) * 0.25
    train_x, train_y = make_data(8192, centres, gen)
    test_x, test_y = make_data(2048, centres, gen)
    w1 = torch.randn(INPUTS, HIDDEN, generator=gen) * INPUTS ** -0.5
    w2 = torch.randn(HIDDEN, CLASSES, generator=gen) * HIDDEN ** -0.5

    first = loss(w1, w2, train_x[:args.batch], train_y[:args.batch])
    ref = positional_loss(w1, w2, train_x[:args.batch], train_y[:args.batch])
    print(f"named loss {first.item():.6f} == positional loss {ref.item():.6f}: "
          f"{torch.allclose(first, ref, atol=1e-5)}")

    loss_and_grads = nx.value_and_grad(loss, argnums=(0, 1))
    start, history = time.perf_counter(), []
    bar = tqdm(range(args.steps), desc="training", unit="step", mininterval=0.5)
    for step in bar:
        idx = torch.randint(0, train_x.shape[0], (args.batch,), generator=gen)
        value, (g1, g2) = loss_and_grads(w1, w2, train_x[idx], train_y[idx])
        w1, w2 = w1 - args.lr * g1, w2 - args.lr * g2
        history.append(value.item())
        if step % max(1, args.steps // 6) == 0 or step == args.steps - 1:
            tqdm.write(f"step {step:4d}  loss {value.item():.4f}")
            bar.set_postfix(loss=f"{value.item():.3f}")
    bar.close()
    elapsed = time.perf_counter() - start

    accuracy = (predict(w1, w2, test_x).argmax(-1) == test_y).float().mean().item()
    print(f"loss {history[0]:.4f} -> {sum(history[-10:]) / len(history[-10:]):.4f} "
          f"(mean of the last 10 steps) in {args.steps} steps, {elapsed:.1f} s")
    print(f"test accuracy {accuracy:.1%} (chance is {1 / CLASSES:.0%})")
    return {"history": history, "accuracy": accuracy}


if __name__ == "__main__":
    main()
