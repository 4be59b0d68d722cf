"""The xmap tutorial's MLP loss, named and positional, shared by the parallel tests.

``named_loss`` is the tutorial's program word for word where the library has the
pieces (``nx.lax.pdot/psum/pmean``, ``nx.one_hot``); before those exist it uses the
same math through named reductions, so the engines can be tested on their own.
"""
from __future__ import annotations

import torch

import named_axes as nx
from named_axes._tensor import NamedTensor

try:
    from named_axes import lax as _lax
except ImportError:  # the collectives land separately
    _lax = None

HAS_LAX = _lax is not None and all(hasattr(_lax, f) for f in ("pdot", "psum", "pmean"))
IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
           ["batch", ...]]
SIZES = dict(batch=8, inputs=12, hidden=8, classes=4)

# Strategies of the tutorial: (axis_resources, mesh shape, mesh axis names).
STRATEGIES = {
    "batch": ({"batch": "x"}, (4,), ("x",)),
    "hidden": ({"hidden": "x"}, (4,), ("x",)),
    "batch_hidden": ({"batch": "x", "hidden": "y"}, (2, 2), ("x", "y")),
}


def pdot(x, y, name):
    return _lax.pdot(x, y, name) if HAS_LAX else (x * y).sum(name)


def psum(x, name):
    return _lax.psum(x, name) if HAS_LAX else x.sum(name)


def pmean(x, name):
    return _lax.pmean(x, name) if HAS_LAX else x.mean(name)


def one_hot(labels, n, name):
    if hasattr(nx, "one_hot"):
        return nx.one_hot(labels, n, dim=name)
    idx = NamedTensor._wrap(torch.arange(n, device=labels.device), (name,))
    return (labels == idx).to(torch.get_default_dtype())


def named_predict(w1, w2, image):
    hidden = torch.relu(pdot(image, w1, "inputs"))
    logits = pdot(hidden, w2, "hidden")
    return logits - nx.logsumexp(logits, "classes")


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = _lax.psum(1, "classes") if HAS_LAX else SIZES["classes"]
    targets = one_hot(labels, num_classes, "classes")
    losses = psum(targets * predictions, "classes")
    return -pmean(losses, "batch")


def loss(w1, w2, images, labels):
    """The positional reference (the tutorial's first program)."""
    logits = torch.relu(images @ w1) @ w2
    preds = logits - torch.logsumexp(logits, 1, keepdim=True)
    targets = torch.nn.functional.one_hot(labels, w2.shape[1]).to(preds.dtype)
    return -(targets * preds).sum(1).mean()


def data(seed: int = 0, sizes: dict = SIZES, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(sizes["inputs"], sizes["hidden"], generator=g, dtype=dtype) / 3
    w2 = torch.randn(sizes["hidden"], sizes["classes"], generator=g, dtype=dtype) / 3
    images = torch.randn(sizes["batch"], sizes["inputs"], generator=g, dtype=dtype)
    labels = torch.randint(0, sizes["classes"], (sizes["batch"],), generator=g)
    return w1, w2, images, labels


def xmapped(axis_resources=None, fun=named_loss):
    return nx.xmap(fun, in_axes=IN_AXES, out_axes=[...], axis_resources=axis_resources)


def loss_and_grads(f, w1, w2, images, labels):
    w1 = w1.detach().clone().requires_grad_(True)
    w2 = w2.detach().clone().requires_grad_(True)
    out = f(w1, w2, images, labels)
    g1, g2 = torch.autograd.grad(out, (w1, w2))
    return out.detach(), g1, g2
