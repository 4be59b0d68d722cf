"""Jacobians and Hessians per named index: ``jacrev``, ``jacfwd``, ``hessian``.

Outside a named program on plain tensors these are ``torch.func``'s own.  With named
values (or inside an xmap) they are built as JAX builds them: ``jacrev`` pulls back
one basis cotangent per positional entry of each output through :func:`nx.vjp
<named_axes.transforms._grad.vjp>`, ``jacfwd`` pushes one basis tangent per positional
entry of each input through :func:`nx.jvp <named_axes.transforms._grad.jvp>`.  So they
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
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .._env import bound_axes
from .._tensor import NamedTensor
from .._torch_func import ORIGINAL as _functorch
from ._grad import _argnums, jvp, vjp
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
            jac = _functorch["jacrev"] if kind == "rev" else _functorch["jacfwd"]
            return jac(fun, argnums=argnums, has_aux=has_aux)(*args)

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
        return (tree, aux) if has_aux else tree

    return run


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
    """One ``vjp`` pullback per positional entry of each output."""
    res = vjp(of, *primals, has_aux=has_aux)
    out, pullback = res[0], res[1]
    outs, spec = tree_flatten(out)
    rows = []
    for j, o in enumerate(outs):
        shape = _pos_shape(o)
        cols: list = [[] for _ in primals]
        for e in _basis(shape, o):
            ct = [e if k == j else _zeros(x) for k, x in enumerate(outs)]
            for col, g in zip(cols, pullback(tree_unflatten(ct, spec))):
                col.append(g)
        rows.append([torch.stack(col).reshape(shape + _pos_shape(p))
                     for col, p in zip(cols, primals)])
    return (rows, spec), (res[2] if has_aux else None)


def _jacfwd_named(of: Callable, primals: list, has_aux: bool) -> tuple:
    """One ``jvp`` per positional entry of each input."""
    per_input, aux, spec = [], None, None
    for i, p in enumerate(primals):
        cols: list = []
        for e in _basis(_pos_shape(p), p):
            tangents = tuple(e if k == i else _zeros(q) for k, q in enumerate(primals))
            res = jvp(of, tuple(primals), tangents, has_aux=has_aux)
            t_leaves, spec = tree_flatten(res[1])
            cols.append(t_leaves)
            aux = res[2] if has_aux else None
        per_input.append(cols)
    if spec is None:   # no input entries: the output's structure from one call
        res = jvp(of, tuple(primals), tuple(_zeros(q) for q in primals), has_aux=has_aux)
        spec, aux = tree_flatten(res[1])[1], (res[2] if has_aux else None)
    rows = []
    for j in range(spec.num_leaves):
        row = []
        for cols, p in zip(per_input, primals):
            shape = _pos_shape(p)
            stacked = torch.stack([c[j] for c in cols], dim=-1) if cols else None
            lead = _pos_shape(stacked)[:-1] if stacked is not None else ()
            row.append(stacked.reshape(lead + shape))
        rows.append(row)
    return (rows, spec), aux


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
