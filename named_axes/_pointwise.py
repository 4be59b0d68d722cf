"""The pointwise kernel: elementwise ops on NamedTensors, broadcast by name.

One place decides how operands line up (docs/guide.md §1: the result has the union of the
operands' names; equal names need equal sizes; positional axes broadcast as torch's
do): :func:`pointwise` is the registered rule of every elementwise op, reached through
the dispatcher like every other rule.  It passes operands that already line up as they
are (:func:`inline_operand`), broadcasts two named operands by name with a plan per
layout (:func:`by_name`), and aligns anything else to the union of names.

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

from ._dispatch import ShapeError, result
from ._layout import align, align_plan, apply_align, union_names
from ._plancache import PlanCache
from ._registry import op_name
from ._tensor import NamedTensor

__all__ = ["pointwise_rule", "pointwise", "inline_operand", "by_name", "NO"]

_NT = NamedTensor
_T = _Tensor = torch.Tensor
_ndarray = np.ndarray


NO = object()   # "this operand does not line up": take the general path


def inline_operand(b, d0: torch.Tensor, names: tuple):
    """The physical operand to pair with ``d0`` (named ``names``) dim for dim: a scalar,
    a NamedTensor with the same layout, or a plain tensor no wider than the positional
    part; ``NO`` for anything else (a sequence holding named values included)."""
    t = type(b)
    if t is _NT:
        bn, bd = b._names, b._data
        if bn is not names and bn != names:
            return NO
        # equal names need equal sizes: a shared names tuple doesn't promise that (vmap's
        # chunk_size narrows a named dim and keeps the tuple), so the sizes are compared
        if bd.shape == d0.shape or (bd.dim() == d0.dim()
                                    and bd.shape[:len(names)] == d0.shape[:len(names)]):
            return bd
        return NO
    if t is float or t is int or t is bool:
        return b
    if isinstance(b, _T):
        return b if b.dim() <= d0.dim() - len(names) else NO
    if t is _ndarray or (t is list or t is tuple) and any(type(e) is _NT for e in b):
        return NO
    return b   # other scalars (complex, None, ...) and plain sequences


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
    return result(func(da, db), U, func)


def pointwise_rule(inplace: bool):
    """The registered rule of an elementwise op (in place: the target is returned)."""
    return _pointwise_inplace if inplace else pointwise


def _pointwise_inplace(func, args, kwargs):
    return pointwise(func, args, kwargs, True)


def pointwise(func: Callable, args: tuple, kwargs: dict, inplace: bool = False) -> Any:
    """Elementwise/broadcasting ops: the result has the union of the operands' names.

    One plan, tried in order: operands that already line up with the first one (same
    names and layout, scalars, plain tensors within its positional part) are passed as
    they are; two named operands with other layouts broadcast by name (planned once per
    layout); everything else is aligned to the union of the names."""
    a0 = args[0] if args else None
    if type(a0) is _NT and not kwargs:
        d0 = a0._data
        names = a0._names
        n = len(args)
        if n == 1:
            out = func(d0)
            return a0 if inplace else result(out, names, func)
        if n == 2:
            b = args[1]
            p = inline_operand(b, d0, names)
            if p is not NO:
                out = func(d0, p)
                return a0 if inplace else result(out, names, func)
            if not inplace and names and type(b) is _NT and b._names \
                    and not torch.compiler.is_dynamo_compiling():
                out = by_name(func, a0, b)
                if out is not None:
                    return out
        else:
            phys = [d0]
            for b in args[1:]:
                p = inline_operand(b, d0, names)
                if p is NO:
                    break
                phys.append(p)
            else:
                out = func(*phys)
                return a0 if inplace else result(out, names, func)
    return _pointwise_general(func, args, kwargs, inplace)


def _pointwise_general(func, args, kwargs, inplace):
    for a in args:   # numpy operands act as tensors (torch's in-place ops ignore them)
        if type(a) is _ndarray:
            # (np.require keeps a 0-d array 0-d; np.ascontiguousarray makes it 1-d)
            args = tuple(torch.from_numpy(np.require(v, requirements="C"))
                         if type(v) is _ndarray else v for v in args)
            break
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
        U = target._names   # (dispatch ran check_inplace)
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
