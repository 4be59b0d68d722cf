"""Rules for the autograd entry points on named values: ``Tensor.backward``,
``Tensor.register_hook`` and ``torch.autograd.grad``.  Gradients are laid out like
the values they belong to; a named scalar's ``backward()`` seeds every instance.

>>> import torch, named_axes as nx
>>> w = torch.ones(3, requires_grad=True)
>>> (nx.named(torch.arange(6.).reshape(2, 3), 'b ...') * w).sum().backward()
>>> w.grad
tensor([3., 5., 7.])
"""
from __future__ import annotations

import functools

import torch

from .._errors import ShapeError
from .._layout import align_to
from .._registry import register
from .._tensor import NamedTensor

_NT = NamedTensor


def _backward(func, args, kwargs):
    x = args[0]
    grad = args[1] if len(args) > 1 else kwargs.pop("gradient", None)
    rest = args[2:]
    if grad is None and x.ndim == 0:
        grad = torch.ones_like(x._data)   # a named scalar: the loop of backward() calls, summed
    elif grad is not None:
        grad = align_to(grad, x._names, x.ndim, what="Tensor.backward gradient")
        grad = grad.expand_as(x._data)
    return x._data.backward(grad, *rest, **kwargs)


def _register_hook(func, args, kwargs):
    x, hook = args[0], args[1]
    names, p = x._names, x.ndim

    def physical_hook(g):
        out = hook(NamedTensor._wrap(g, names))
        if type(out) is not _NT:
            return out
        # laid out as the gradient (the hook's result may carry the names in another order)
        return align_to(out, names, p, what="Tensor.register_hook result")
    return x._data.register_hook(physical_hook)


def _autograd_grad(func, args, kwargs):
    outputs = args[0] if args else kwargs.pop("outputs")
    inputs = args[1] if len(args) > 1 else kwargs.pop("inputs")
    grad_outputs = args[2] if len(args) > 2 else kwargs.pop("grad_outputs", None)
    outs, ins = (list(v) if isinstance(v, (list, tuple)) else [v] for v in (outputs, inputs))
    if grad_outputs is None:
        gos = [torch.ones_like(o._data) if type(o) is _NT and o.ndim == 0 else None for o in outs]
    else:
        gos = grad_outputs if isinstance(grad_outputs, (list, tuple)) else [grad_outputs]
        gos = [_grad_output(g, outs[i] if i < len(outs) else None) for i, g in enumerate(gos)]
    grads = torch.autograd.grad([o._data if type(o) is _NT else o for o in outs],
                                [i._data if type(i) is _NT else i for i in ins], gos, **kwargs)
    return tuple(NamedTensor._wrap(g, i._names) if type(i) is _NT and g is not None else g
                 for g, i in zip(grads, ins))


def _grad_output(g, out):
    """Gradient ``g`` laid out like the output ``out`` it belongs to: by name, and
    broadcast over the output's named axes it lacks (as ``Tensor.backward``'s)."""
    if type(out) is not _NT or g is None:
        return g._data if type(g) is _NT else g
    if tuple(g.shape) != tuple(out.shape):
        raise ShapeError(f"torch.autograd.grad: a grad_output has positional shape "
                         f"{tuple(g.shape)} but its output has {tuple(out.shape)} (named "
                         f"shape {out.named_shape}); each instance's gradient must have the "
                         f"output's positional shape")
    g = align_to(g, out._names, out.ndim, what="torch.autograd.grad grad_outputs")
    return g.expand_as(out._data)   # (a plain gradient: the same for every instance)


_declare = functools.partial(register, kind="shape")


def install() -> None:
    T = torch.Tensor
    _declare([T.backward], _backward)
    _declare([T.register_hook], _register_hook)
    _declare([torch.autograd.grad], _autograd_grad)
