"""The xmap tutorial's four strategies for one MLP loss, on torch.distributed.

Run on 4 CPU processes (gloo):

    torchrun --nproc-per-node=4 examples/data_parallel.py

or in one process (the mesh then has one device and everything runs vectorized):

    python examples/data_parallel.py

The same ``named_loss`` runs vectorized, data parallel (``batch`` over mesh axis ``x``),
model parallel (``hidden`` over ``x``) and both (``batch`` over ``x``, ``hidden`` over
``y`` on a 2x2 mesh) — without rewriting it — and gives the same loss and gradients.
Then a few data-parallel SGD steps: every rank passes the full batch, DTensor splits
it, and every rank gets the full gradients back.
"""
from __future__ import annotations

import os

import numpy as np
import torch

import named_axes as nx
from named_axes import lax
from named_axes import parallel as P


def named_predict(w1, w2, image):
    hidden = torch.relu(lax.pdot(image, w1, "inputs"))
    logits = lax.pdot(hidden, w2, "hidden")
    return logits - nx.logsumexp(logits, "classes")


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = lax.psum(1, "classes")
    targets = nx.one_hot(labels, num_classes, dim="classes")
    losses = lax.psum(targets * predictions, "classes")
    return -lax.pmean(losses, "batch")


IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
           ["batch", ...]]


def main() -> None:
    if "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    rank, n = P.process_index(), P.device_count()
    say = print if rank == 0 else (lambda *a, **k: None)

    g = torch.Generator().manual_seed(0)                 # same data on every rank
    w1 = torch.randn(784, 512, generator=g) / 28
    w2 = torch.randn(512, 10, generator=g) / 22
    images = torch.randn(128, 784, generator=g)
    labels = torch.randint(0, 10, (128,), generator=g)

    devs = np.array(P.devices())
    two_d = devs.reshape(2, n // 2) if n % 2 == 0 and n > 1 else devs.reshape(n, 1)
    strategies = [
        ("vectorized", None, None),
        ("data parallel  {'batch': 'x'}", {"batch": "x"}, (devs, ("x",))),
        ("model parallel {'hidden': 'x'}", {"hidden": "x"}, (devs, ("x",))),
        ("both {'batch': 'x', 'hidden': 'y'}", {"batch": "x", "hidden": "y"}, (two_d, ("x", "y"))),
    ]
    say(f"{n} device(s): {P.devices()}")
    for label, resources, mesh in strategies:
        f = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources=resources)
        a, b = w1.clone().requires_grad_(), w2.clone().requires_grad_()
        if mesh is None:
            loss = f(a, b, images, labels)
        else:
            with P.Mesh(*mesh):
                loss = f(a, b, images, labels)
        loss.backward()
        say(f"{label:36s} loss {loss.item():.6f}  |grad w1| {a.grad.norm():.6f}  "
            f"|grad w2| {b.grad.norm():.6f}")

    say("data-parallel SGD:")
    step = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources={"batch": "x"})
    w1.requires_grad_(), w2.requires_grad_()
    with P.Mesh(devs, ("x",)):
        for i in range(5):
            loss = step(w1, w2, images, labels)
            g1, g2 = torch.autograd.grad(loss, (w1, w2))
            with torch.no_grad():
                w1 -= 0.2 * g1
                w2 -= 0.2 * g2
            say(f"  step {i}: loss {loss.item():.6f}")

    if "RANK" in os.environ:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
