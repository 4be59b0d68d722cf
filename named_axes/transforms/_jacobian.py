"""Jacobians and Hessians per named index: ``jacrev``, ``jacfwd``, ``hessian``.

Outside a named program on plain tensors these are ``torch.func``'s own.  With named
values (or inside an xmap) they are built as JAX builds them: ``jacrev`` pulls back
one basis cotangent per positional entry of each output through :func:`nx.vjp
<named_axes.transforms._vjp.vjp>`, ``jacfwd`` pushes one basis tangent per positional
entry of each input through :func:`nx.jvp <named_axes.transforms._forward.jvp>`.  So they
follow the same per-instance convention as ``grad``/``vjp``/``jvp`` inside xmap (a
closed-over named value, a ``psum`` in the function): no rule of their own.

>>> import torch, named_axes as nx
>>> nx.jacrev(torch.sin)(torch.zeros(2))
tensor([[1., 0.],
        [0., 1.]])
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import torch

from .._env import bind, bound_axes
from .._tensor import NamedTensor
from .._levels import ORIGINAL as _functorch
from .._torch_private import tree_flatten, tree_map, tree_unflatten
from ._custom import forward_begin, forward_end
from ._forward import jvp
from ._grad import _argnums
from ._vjp import vjp
from ._tree import named_axes_of

__all__ = ["jacrev", "jacfwd", "hessian"]

_NT = NamedTensor


def _jac(kind: str, fun: Callable, argnums, has_aux: bool) -> Callable:
    """Jacobian of ``fun``: ``out.shape + in.shape`` positionally, per named index."""
    what = f"jac{kind}({getattr(fun, '__name__', 'fun')})"

    @functools.wraps(fun)
    def run(*args):
        nums = _argnums(argnums, len(args), what)
        if not named_axes_of(args) and not bound_axes():   # torch.func's own
            args = tree_map(lambda a: a._data if type(a) is NamedTensor else a, args)
            if kind == "rev":
                return _functorch["jacrev"](fun, argnums=argnums, has_aux=has_aux)(*args)
            forward_begin()
            try:
                return _functorch["jacfwd"](fun, argnums=argnums, has_aux=has_aux)(*args)
            finally:
                forward_end()

        def of(*primals):   # fun of the differentiated arguments only
            full = list(args)
            for i, p in zip(nums, primals):
                full[i] = p
            return fun(*full)

        primals = [args[i] for i in nums]
        build = _jacrev_named if kind == "rev" else _jacfwd_named
        jac, aux = build(of, primals, has_aux)
        # torch.func's layout: the output's structure, each leaf one Jacobian per argnum
        out_leaves, out_spec = jac
        single = isinstance(argnums, int)
        tree = tree_unflatten([row[0] if single else tuple(row) for row in out_leaves],
                              out_spec)
        tree = tree_map(_materialized, tree)
        return (tree, aux) if has_aux else tree

    return run


def _materialized(t: Any) -> Any:
    """``t`` with forward mode's efficient zeros (a ZeroTensor: a Jacobian that is zero
    everywhere, e.g. the Hessian of ``abs``) made ordinary zeros, which every later op
    and ``.numpy()`` take: a clone, the one public way to make them (which outputs are
    zero shows only when the program runs, so a traced one clones too)."""
    data = t._data if type(t) is _NT else t
    if not isinstance(data, torch.Tensor):
        return t
    data = data.clone()
    return NamedTensor._wrap(data, t._names) if type(t) is _NT else data


def _pos_shape(x: Any) -> tuple:
    return tuple(x.shape) if type(x) is _NT or isinstance(x, torch.Tensor) else ()


def _basis(shape: tuple, like: Any) -> torch.Tensor:
    """The ``prod(shape)`` one-hot entries of ``shape``, stacked on a leading dim."""
    data = like._data if type(like) is _NT else torch.as_tensor(like)
    m = math.prod(shape)
    return torch.eye(m, dtype=data.dtype, device=data.device).reshape((m,) + shape)


def _zeros(x: Any) -> torch.Tensor:
    data = x._data if type(x) is _NT else torch.as_tensor(x)
    return torch.zeros(_pos_shape(x), dtype=data.dtype, device=data.device)


def _jacrev_named(of: Callable, primals: list, has_aux: bool) -> tuple:
    """The ``vjp`` pullback of each output's basis cotangents, mapped over a fresh named
    axis (a pullback maps over cotangent axes bound after its forward)."""
    res = vjp(of, *primals, has_aux=has_aux)
    out, pullback = res[0], res[1]
    outs, spec = tree_flatten(out)
    rows = []
    for j, o in enumerate(outs):
        shape = _pos_shape(o)
        basis = _basis(shape, o)   # one row per entry of the output
        name = _JacAxis(j)
        with bind({name: basis.shape[0]}, kind="vmap"):
            e = NamedTensor._wrap(basis, (name,))
            grads = pullback(tree_unflatten([e if k == j else _zeros(x)
                                             for k, x in enumerate(outs)], spec))
        # the basis axis moved first: out.shape + in.shape
        rows.append([_moved(g, name, 0, shape, _pos_shape(p)) for g, p in zip(grads, primals)])
    return (rows, spec), (res[2] if has_aux else None)


def _jacfwd_named(of: Callable, primals: list, has_aux: bool) -> tuple:
    """The ``jvp`` of each input's basis tangents, mapped over a fresh named axis."""
    per_input, aux, spec = [], None, None
    for i, p in enumerate(primals):
        basis = _basis(_pos_shape(p), p)   # one column per entry of the input
        name = _JacAxis(i)
        with bind({name: basis.shape[0]}, kind="vmap"):
            e = NamedTensor._wrap(basis, (name,))
            tangents = tuple(e if k == i else _zeros(q) for k, q in enumerate(primals))
            res = jvp(of, tuple(primals), tangents, has_aux=has_aux,
                      _batch={name: basis.shape[0]})
        leaves, spec = tree_flatten(res[1])
        aux = res[2] if has_aux else None
        # the basis axis moved last: out.shape + in.shape
        per_input.append([_moved(t, name, -1, (), _pos_shape(p)) for t in leaves])
    rows = [[cols[j] for cols in per_input] for j in range(spec.num_leaves)]
    return (rows, spec), aux


class _JacAxis:
    """The name of a Jacobian's basis axis (unique per object, never a user's name)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __repr__(self) -> str:
        return f"<jacobian basis {self.k}>"


def _moved(t: NamedTensor, name: Any, where: int, before: tuple, after: tuple) -> Any:
    """``t``'s named axis ``name`` made its first (``where=0``: unflattened to ``before``)
    or last (``-1``: unflattened to ``after``) positional dims."""
    i = t._names.index(name)
    rest = t._names[:i] + t._names[i + 1:]
    data = t._data.movedim(i, len(rest) if where == 0 else -1)
    lead = tuple(data.shape[:len(rest)])
    body = tuple(data.shape[len(rest):])
    pos = before + body[1:] if where == 0 else body[:-1] + after
    data = data.reshape(lead + pos)
    return NamedTensor._wrap(data, rest) if rest else data


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
    return _jac("fwd", _jac("rev", fun, argnums, False), argnums, False)
