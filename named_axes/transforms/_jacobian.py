"""Jacobians and Hessians per named index: ``jacrev``, ``jacfwd``, ``hessian``.

Named axes are mapped away with ``torch.func.vmap`` (one Jacobian per named index, as
under JAX's xmap), the positional program is differentiated by ``torch.func``, and the
names are put back.

>>> import torch, named_axes as nx
>>> nx.jacrev(torch.sin)(torch.zeros(2))
tensor([[1., 0.],
        [0., 1.]])
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .._errors import AxisTypeError
from .._layout import align
from .._tensor import NamedTensor
from .._torch_func import ORIGINAL as _functorch
from ._grad import _argnums
from ._tree import named_axes_of

__all__ = ["jacrev", "jacfwd", "hessian"]

_NT = NamedTensor


def _jac(kind: str, fun: Callable, argnums, has_aux: bool) -> Callable:
    """Jacobian of ``fun`` per named index: ``out.shape + in.shape`` positionally."""
    jac = _functorch["jacrev"] if kind == "rev" else _functorch["jacfwd"]
    what = f"jac{kind}({getattr(fun, '__name__', 'fun')})"
    fun = _plain_outputs(fun, what)

    @functools.wraps(fun)
    def run(*args):
        _argnums(argnums, len(args), what)   # checks argnums
        if not named_axes_of(args):   # (NamedTensors without names: their data)
            args = tree_map(lambda a: a._data if type(a) is NamedTensor else a, args)
            return jac(fun, argnums=argnums, has_aux=has_aux)(*args)
        # Per named index: map the named axes away (torch.func.vmap), differentiate the
        # positional program, and put the names back.
        sizes = named_axes_of(args)
        order = tuple(sizes)
        flat, spec = tree_flatten(tuple(args))
        phys, member = [], []
        for leaf in flat:
            if isinstance(leaf, _NT):
                have = tuple(n for n in order if n in leaf._names)
                phys.append(align(leaf._data, leaf._names, leaf.ndim, have, leaf.ndim))
                member.append(have)
            else:
                phys.append(leaf)
                member.append(None)
        def per_index(*leaves):
            a = tree_unflatten(list(leaves), spec)
            return jac(fun, argnums=argnums, has_aux=has_aux)(*a)

        f = per_index
        for n in reversed(order):
            dims = tuple(0 if m is not None and n in m else None for m in member)
            f = _functorch["vmap"](f, in_dims=dims)
        out = f(*phys)
        return tree_map(lambda t: NamedTensor._wrap(t, order)
                        if isinstance(t, torch.Tensor) else t, out)

    return run


def _plain_outputs(fun: Callable, what: str) -> Callable:
    """``fun`` with results that carry no named axis as plain tensors (a closed-over
    value inside xmap is a NamedTensor with no names; functorch takes tensors only)."""
    def unname(v):
        if type(v) is not NamedTensor:
            return v
        if v._names:
            raise AxisTypeError(
                f"{what}: the function's result carries named axes {v.named_shape} that no "
                f"argument brought (a closed-over named value); pass that value as an "
                f"argument, or use nx.grad / nx.vjp, which differentiate per instance")
        return v._data

    @functools.wraps(fun)
    def call(*args):
        return tree_map(unname, fun(*args))
    return call


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Jacobian by reverse mode (``torch.func.jacrev``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.jacrev(torch.sin)(torch.zeros(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    return _jac("rev", fun, argnums, has_aux)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Jacobian by forward mode (``torch.func.jacfwd``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.jacfwd(torch.sin)(torch.zeros(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    return _jac("fwd", fun, argnums, has_aux)


def hessian(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Hessian (``jacfwd(jacrev(fun))``), per named index for named inputs.

    >>> import torch, named_axes as nx
    >>> nx.hessian(lambda x: (x ** 3).sum())(torch.tensor([1., 2.]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    inner = _functorch["jacrev"](_plain_outputs(fun, "hessian"), argnums=argnums)
    return _jac("fwd", inner, argnums, False)
