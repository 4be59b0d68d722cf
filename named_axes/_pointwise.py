"""The pointwise kernel: elementwise ops on NamedTensors, broadcast by name.

One place decides how operands line up (docs/guide.md §1: the result has the union of the
operands' names; equal names need equal sizes; positional axes broadcast as torch's
do): :func:`pointwise_rule` is the registered rule of every elementwise op, and the
direct bindings (:mod:`named_axes._bindings`) call the same functions for their
inline lanes -- same-layout operands and scalars (:func:`inline_operand`), two
operands with different names (:func:`by_name`, planned once per layout), and
everything else (:func:`pointwise`: alignment to the union of names).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.ones(2, 3), 'a ...')
>>> y = nx.named(torch.ones(4, 3), 'b ...')
>>> (x + y).named_shape
{'a': 2, 'b': 4}
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from ._dispatch import ShapeError, check_conflicts, result, wrap
from ._env import _state as _env_state
from ._env import conflicts
from ._layout import align, align_plan, apply_align, union_names
from ._plancache import PlanCache
from ._registry import op_name
from ._switches import FASTPATH
from ._writes import check_inplace
from ._tensor import NamedTensor

__all__ = ["pointwise_rule", "pointwise", "inline_operand", "by_name", "finish", "NO"]

_NT = NamedTensor
_T = _Tensor = torch.Tensor
_wrap_nt = NamedTensor._wrap
_ndarray = np.ndarray


def _same_layout(a: _NT, d0: torch.Tensor, names: tuple) -> bool:
    """Does NamedTensor ``a`` line up with ``d0`` (named ``names``) dim for dim?"""
    an = a._names
    if an is not names and an != names:
        return False
    ad = a._data
    # equal names need equal sizes: a shared names tuple doesn't promise that (vmap's
    # chunk_size narrows a named dim and keeps the tuple), so the sizes are compared too
    return ad.shape == d0.shape or (ad.dim() == d0.dim()
                                    and ad.shape[:len(names)] == d0.shape[:len(names)])


NO = object()   # "this operand does not line up": take the general path


def inline_operand(b, d0: torch.Tensor, names: tuple):
    """The physical operand to pair with ``d0`` (named ``names``) dim for dim: a scalar,
    a NamedTensor with the same layout, or a plain tensor no wider than the positional
    part; ``NO`` for anything else."""
    t = type(b)
    if t is _NT:
        return b._data if _same_layout(b, d0, names) else NO
    if t is float or t is int or t is bool:
        return b
    if isinstance(b, _T) and b.dim() <= d0.dim() - len(names):
        return b
    return NO


def finish(out, names: tuple, func):
    """Wrap a pointwise result; the resource-conflict check only when a rule is in force."""
    if _env_state.conflicts and len(names) > 1:
        check_conflicts(names, op_name(func))
    if not names:   # no named axis left: plain tensors (see _dispatch.wrap)
        return out
    return _wrap_nt(out, names) if type(out) is _T else wrap(out, names)


class ByNamePlan(NamedTuple):
    """How ``_by_name`` lays out a and b."""
    names: tuple        # the union of their names, a's first
    pairs: tuple        # (i, j): a's dim i and b's dim j carry the same name
    align_a: tuple | None   # align_plan of a into the common layout (None: as it is)
    align_b: tuple | None


def _by_name_plan(na: tuple, ndim_a: int, nb: tuple, ndim_b: int) -> ByNamePlan:
    pa, pb = ndim_a - len(na), ndim_b - len(nb)
    U = na + tuple(n for n in nb if n not in na)
    P = max(pa, pb)
    return ByNamePlan(U, tuple((i, nb.index(n)) for i, n in enumerate(na) if n in nb),
                      align_plan(na, pa, U, P), align_plan(nb, pb, U, P))


_BY_NAME = PlanCache("by_name", _by_name_plan)


def by_name(func, a: _NT, b: _NT):
    """``func(a, b)`` broadcast by name (the dispatcher's general path, planned once per
    layout); None when the shared names' sizes differ, to let that path raise."""
    da, db = a._data, b._data
    plan = _BY_NAME(a._names, da.dim(), b._names, db.dim())
    U, pairs, plan_a, plan_b = plan
    sa, sb = da.shape, db.shape
    for i, j in pairs:
        if sa[i] != sb[j]:
            return None
    if plan_a is not None:
        da = apply_align(da, plan_a)
    if plan_b is not None:
        db = apply_align(db, plan_b)
    return finish(func(da, db), U, func)


def _pointwise(func, args, kwargs):
    """The RULES entry of out-of-place elementwise ops: the 1- and 2-argument cases
    inline, everything else through :func:`named_axes._dispatch.pointwise`."""
    n = len(args)
    if n and n <= 2 and not kwargs and FASTPATH:
        a0 = args[0]
        if type(a0) is _NT:
            d0 = a0._data
            names = a0._names
            if n == 1:
                return finish(func(d0), names, func)
            b = args[1]
            phys = inline_operand(b, d0, names)
            if phys is not NO:
                return finish(func(d0, phys), names, func)
            t = type(b)
            if t is _NT:
                if names and b._names and not torch.compiler.is_compiling():
                    out = by_name(func, a0, b)
                    if out is not None:
                        return out
            elif not isinstance(b, _T) and t is not list and t is not tuple:
                return finish(func(d0, b), names, func)   # other scalars (complex, ...)
    return pointwise(func, args, kwargs)


def _pointwise_inplace(func, args, kwargs):
    """``_pointwise`` for in-place ops: the target keeps its names and is returned."""
    if len(args) == 2 and not kwargs and FASTPATH:
        a0, b = args
        if type(a0) is _NT:
            phys = inline_operand(b, a0._data, a0._names)
            if phys is not NO:
                func(a0._data, phys)
                return a0
    return pointwise(func, args, kwargs, True)


def pointwise_rule(inplace: bool):
    return _pointwise_inplace if inplace else _pointwise


def pointwise(func: Callable, args: tuple, kwargs: dict, inplace: bool = False) -> Any:
    """Elementwise/broadcasting ops: the result has the union of the operands' names."""
    for a in args:   # numpy operands act as tensors (torch's in-place ops ignore them)
        if type(a) is _ndarray:
            args = tuple(torch.from_numpy(v) if type(v) is _ndarray else v for v in args)
            break
    # Fast path: the first argument is the only NamedTensor, the rest are scalars or
    # plain tensors that broadcast within its positional part.
    a0 = args[0] if args else None
    if type(a0) is _NT and not kwargs:
        names = a0._names
        p = a0._data.dim() - len(names)
        simple = True
        for a in args[1:]:
            t = type(a)
            if t is _NT:
                if a._names != names or a._data.dim() != a0._data.dim() \
                        or a._data.shape[:len(names)] != a0._data.shape[:len(names)]:
                    simple = False
                    break
            elif t is _Tensor or isinstance(a, _Tensor):
                if a.dim() > p:
                    simple = False
                    break
            elif t in (list, tuple) and any(type(e) is _NT for e in a):
                return NotImplemented
        if simple:
            data = [a._data if type(a) is _NT else a for a in args]
            out = func(*data)
            if inplace:
                return a0
            if conflicts():
                check_conflicts(names, op_name(func))
            return wrap(out, names)
    return _pointwise_general(func, args, kwargs, inplace)


def _pointwise_general(func, args, kwargs, inplace):
    operands = []
    P = 0
    for i, a in enumerate(args):
        if type(a) is _NT:
            operands.append((f"args[{i}]", a))
            P = max(P, a.ndim)
        elif isinstance(a, _Tensor):
            P = max(P, a.dim())
        elif isinstance(a, (list, tuple)) and any(isinstance(e, _NT) for e in a):
            return NotImplemented
    for k, v in kwargs.items():
        if type(v) is _NT:
            if k == "out":
                return NotImplemented
            operands.append((k, v))
            P = max(P, v.ndim)
        elif isinstance(v, _Tensor):
            P = max(P, v.dim())
    U = union_names(operands, op=func)
    if inplace:
        target = args[0]
        if not isinstance(target, _NT):
            return NotImplemented
        check_inplace(func, args, kwargs)
        U = target._names
        if target.ndim < P:
            raise ShapeError(
                f"{op_name(func)}: in-place update of a value with positional shape "
                f"{tuple(target.shape)} by operands with {P} positional dims"
            )

    def phys(a):
        if type(a) is _NT:
            return align(a._data, a._names, a._data.dim() - len(a._names), U, P)
        return a

    out = func(*[phys(a) for a in args], **{k: phys(v) for k, v in kwargs.items()})
    if inplace:
        return args[0]
    return result(out, U, func)
