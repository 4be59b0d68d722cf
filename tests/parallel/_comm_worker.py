"""One rank of test_parallel_dtensor_comms.py (2 gloo ranks via torchrun).

Writes ``rank{R}.json`` into argv[1]: per scenario, the error against the single-process
loss and gradients and the collectives one call (forward + backward) issued.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import _tutorial_program as T  # noqa: E402
from _ranks import err, run_rank  # noqa: E402

from named_axes import parallel as P  # noqa: E402


def counts(fn):
    from torch.distributed.tensor.debug import CommDebugMode

    mode = CommDebugMode()
    with mode:
        out = fn()
    return out, {str(k).split(".")[-1]: int(v) for k, v in mode.get_comm_counts().items()}


def loss_and_all_grads(f, w1, w2, images, labels):
    """Gradients for the weights and the images (a sharded input's gradient)."""
    w1, w2, images = (t.clone().requires_grad_() for t in (w1, w2, images))
    loss = f(w1, w2, images, labels)
    return (loss.detach(), *torch.autograd.grad(loss, (w1, w2, images)))


def comms(rank, results):
    """Per strategy: error against the single process and the collectives of one call."""
    d = T.data(seed=3)
    mesh = P.Mesh(np.array(P.devices()), ("x",))
    for key, res in (("batch", {"batch": "x"}), ("hidden", {"hidden": "x"})):
        with mesh:
            f = T.xmapped(res)
            out, c = counts(lambda: T.loss_and_grads(f, *d))
            results[key] = dict(err=err(T.loss_and_grads(T.loss, *d), out), comms=c)
            out, c = counts(lambda: loss_and_all_grads(f, *d))
            results[key + "_images"] = dict(
                err=err(loss_and_all_grads(T.loss, *d), out), comms=c,
                types=[type(t).__name__ for t in out])


if __name__ == "__main__":
    run_rank([comms])
