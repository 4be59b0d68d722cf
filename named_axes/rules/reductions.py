"""Reductions and dim translation: a dim argument may name axes (docs/guide.md §1).

:func:`_dims_of` turns an int, a name or a tuple mixing both into physical dims
(broadcasting a value along a bound name it lacks); the reduction rules reduce named
dims and drop them from the named shape, with torch's return conventions.
"""
from __future__ import annotations

import math

from typing import Callable, NamedTuple

import torch

from .._dispatch import result
from .._env import _state as _env_state
from .._env import bound_axes, current_frame
from .._errors import AxisSpecError, AxisTypeError, UnboundAxisError, unbound_message
from .._layout import expand_to
from .._plancache import PlanCache
from .pointwise import pointwise
from .._registry import op_name, register
from .._tensor import NamedTensor
from ._common import _norm_pos, _spelled, per_tensor

_NT = NamedTensor
_T = torch.Tensor
_wrap_nt = NamedTensor._wrap


def _with_names(x: _NT, wanted, op) -> _NT:
    """``x`` broadcast along every wanted name it lacks but the environment binds."""
    for n in wanted:
        if n not in x._names:
            try:
                if type(n) is not str:     # dynamo can't trace hash(str)
                    hash(n)
            except TypeError:
                raise AxisTypeError(
                    f"{_spelled(op)}: {n!r} is neither a dimension nor an axis name") from None
            if n not in bound_axes():
                raise UnboundAxisError(
                    unbound_message(n, bound_axes(), op=_spelled(op), carried=x._names))
            x = expand_to(x, n, op=_spelled(op))
    return x


def _check_engines(names, op) -> None:
    """An engine that splits an axis (e.g. SerialLoop chunks) vets ops that mix values along it."""
    if not _env_state.engine:   # (no frame in scope has one)
        return
    for n in names:
        frame = current_frame(n)
        if frame is not None and frame.engine is not None:
            frame.engine.check_named_op(_spelled(op), tuple(names))


# name -> (index of the dim argument, whether it accepts several dims)
REDUCTIONS = {
    "sum": (1, True), "nansum": (1, True), "mean": (1, True), "nanmean": (1, True),
    "amax": (1, True), "amin": (1, True), "logsumexp": (1, True), "var": (1, True),
    "std": (1, True), "var_mean": (1, True), "std_mean": (1, True), "all": (1, True),
    "any": (1, True), "count_nonzero": (1, True), "prod": (1, False),
    "argmax": (1, False), "argmin": (1, False), "max": (1, False), "min": (1, False),
    "median": (1, False), "nanmedian": (1, False), "mode": (1, False), "norm": (2, True),
}
# where positional `keepdim` sits, relative to the dim argument
_KEEPDIM_AFTER = {"var": 2, "std": 2, "var_mean": 2, "std_mean": 2}
# the dim an op uses when none is given (ops not listed: every dim, none, or a legacy one)
DEFAULT_DIM = {"mode": -1, "kthvalue": -1, "unbind": 0, "sort": -1, "argsort": -1,
               "topk": -1, "diff": -1, "split": 0, "chunk": 0, "tensor_split": 0,
               "normalize": 1, "glu": -1}
# with no dim, these return values only (torch.max(x) vs torch.max(x, 0))
_VALUES_ONLY = {"max", "min", "median", "nanmedian"}


class DimsPlan(NamedTuple):
    """What :func:`_dims_of` works out for a dim argument."""
    phys: tuple         # physical dims
    named: tuple        # the dims of named axes among them
    names_left: tuple   # names after reducing the named dims
    asked: tuple        # names the argument asked for


# (names, physical ndim, dim spec) -> DimsPlan, for values that lack none of the names
_DIMS = PlanCache("dims")


def _plain_spec(dims) -> bool:
    """Only ints and strings key the cache (True == 1 and 1.0 == 1 would collide)."""
    t = type(dims)
    if t is int or t is str:
        return True
    if t is tuple:
        for d in dims:
            if type(d) is not int and type(d) is not str:
                return False
        return True
    return False


def _dims_of(x: _NT, dims, op):
    """A dim spec (int, name, or tuple mixing both) as physical dims: ``(x', DimsPlan)``,
    ``x'`` being ``x`` broadcast along the bound names it lacked (a plan then not cached:
    it depends on the environment).  ``op``: a name or the torch function."""
    key = None
    if _plain_spec(dims):
        key = (x._names, x._data.dim(), dims)
        hit = _DIMS.lookup(key)
        if hit is not None:
            if hit.asked:
                _check_engines(hit.asked, op)
            return x, hit
    items = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    asked = tuple(d for d in items if not isinstance(d, int))
    x2 = x
    if asked:
        x2 = _with_names(x, asked, op)
        _check_engines(asked, op)
    k = len(x2._names)
    p = x2._data.dim() - k
    phys = tuple(k + _norm_pos(d, p, op) if isinstance(d, int) and not isinstance(d, bool)
                 else x2._names.index(d) for d in items)
    if len(set(phys)) != len(phys):
        raise AxisSpecError(f"{_spelled(op)}: dimension spec {dims!r} names one dimension twice")
    named = tuple(d for d in phys if d < k)
    entry = DimsPlan(phys, named, tuple(n for i, n in enumerate(x2._names) if i not in named),
                     asked)
    if key is not None and x2 is x:
        _DIMS.store(key, entry)
    return x2, entry


def _reduction(name: str, dim_index: int, multi: bool):
    pos = dim_index - 1
    keep_pos = pos + _KEEPDIM_AFTER.get(name, 1)
    has_keepdim = name != "count_nonzero"

    def rule(func, args, kwargs):
        x = args[0]
        if type(x) is not _NT:
            return NotImplemented
        if len(args) == 2 and not kwargs and pos == 0:   # x.sum(dims): keepdim=False
            dims = args[1]
            if dims is not None and type(dims) is not bool and not isinstance(dims, (_NT, _T)):
                x2, (phys, named, names_left, _) = _dims_of(x, dims, func)
                if phys and (multi or len(phys) == 1):
                    return result(func(x2._data, phys if multi else phys[0]), names_left, func)
        rest = list(args[1:])
        kw = dim_keyword(func, kwargs)
        if any(isinstance(a, (_NT, _T)) for a in (*rest, *kw.values())):
            if name in ("max", "min") and rest and isinstance(rest[0], (_NT, _T)):
                return pointwise(torch.maximum if name == "max" else torch.minimum,
                                 (x, rest[0]), {})
            return NotImplemented
        dims = take(rest, kw, pos, "dim", DEFAULT_DIM.get(name))
        if type(dims) is bool and name in _KEEPDIM_AFTER:
            # x.std(True): torch's std/var(unbiased) overload, under the vmap fallback
            return NotImplemented
        keepdim = bool(take(rest, kw, keep_pos - 1, "keepdim", False))
        call = _Call(func, rest, kw, pos, has_keepdim)
        if dims is None:
            return _reduce_positional(call, x, keepdim, name in _VALUES_ONLY)
        return _reduce_dims(call, name, multi, x, dims, keepdim)
    return rule


class _Call(NamedTuple):
    """A reduction's call with its dim and keepdim arguments taken out."""
    func: Callable
    rest: list          # the other positional arguments
    kw: dict            # the other keyword arguments
    pos: int            # where the dim argument goes among ``rest``
    has_keepdim: bool   # False for count_nonzero


def _run(call: _Call, data, dim_arg, keepdim: bool):
    func, rest, kw, pos = call.func, call.rest, call.kw, call.pos
    if not rest and not kw and pos == 0 and call.has_keepdim:
        return func(data, dim_arg, keepdim=keepdim)
    args = list(rest)
    if len(args) >= pos:
        args.insert(pos, dim_arg)
    else:  # the arguments before dim came as keywords (torch.norm(x, p=2, dim=1))
        kw = {**kw, "dim": dim_arg}
    if not call.has_keepdim:  # count_nonzero
        out = func(data, *args, **kw)
        if keepdim:
            dims = dim_arg if isinstance(dim_arg, tuple) else (dim_arg,)
            for d in sorted(dims):
                out = out.unsqueeze(d)
        return out
    return func(data, *args, keepdim=keepdim, **kw)


def dim_keyword(func, kwargs) -> dict:
    """``kwargs`` with ``axis=`` (numpy's spelling) as ``dim=``."""
    kw = dict(kwargs) if kwargs else {}
    if "axis" in kw:
        if "dim" in kw:
            raise AxisTypeError(f"{op_name(func)}: give dim= or axis=, not both")
        kw["dim"] = kw.pop("axis")
    return kw


def take(rest: list, kw: dict, i: int, key: str, default=None):
    """Argument ``i`` of ``rest``, else keyword ``key`` (else ``default``), taken out."""
    return rest.pop(i) if len(rest) > i else kw.pop(key, default)


def _reduce_positional(call: _Call, x: _NT, keepdim: bool, values_only: bool):
    """No dim given: reduce every positional dim, flattened into one."""
    k = len(x._names)
    p = x._data.dim() - k
    if p == 0:
        return NotImplemented
    # (the flattened size spelled out: -1 is ambiguous when a named axis has size 0)
    flat = x._data.reshape(tuple(x._data.shape[:k]) + (math.prod(x._data.shape[k:]),))
    out = _run(call, flat, k, False)
    if values_only:
        out = out[0]
    if keepdim:
        out = per_tensor(lambda t: t.reshape(tuple(x._data.shape[:k]) + (1,) * p), out)
    return result(out, x._names, call.func)


def _reduce_dims(call: _Call, name: str, multi: bool, x: _NT, dims, keepdim: bool):
    func, rest, kw = call.func, call.rest, call.kw
    x, (phys, named, names_left, _) = _dims_of(x, dims, func)
    if not phys:   # dim=(): what torch does with it, per instance of the named axes
        if not multi:
            raise AxisSpecError(f"{op_name(func)}: takes a single dimension, got {dims!r}")
        x, phys, keepdim = _empty_dims(name, x, phys, keepdim)
    if name == "norm" and len(phys) > 2:
        # Frobenius over any set of dims is the vector 2-norm (torch.norm takes <= 2)
        if rest and rest[0] == "fro":
            rest[0] = 2
        elif kw.get("p", "fro") == "fro" and not rest:
            kw["p"] = 2
    if not multi and len(phys) > 1:
        if name != "prod":
            raise AxisSpecError(f"{op_name(func)}: takes a single dimension, got {dims!r}")
        # prod of several dims: one at a time, highest first
        data = x._data
        k = len(x._names)
        for d in sorted(phys, reverse=True):
            data = _run(call, data, d, keepdim or d < k)
        data = data.squeeze(named) if named else data
        return result(data, names_left, func)
    dim_arg = phys if multi else phys[0]
    if named and keepdim:
        # keepdim keeps the positional dims only: the reduced named dims go
        out = per_tensor(lambda t: t.squeeze(named) if t.dim() else t,
                         _run(call, x._data, dim_arg, True))
    else:
        # named dims lead and reduced dims vanish: keepdim=False gives the layout
        out = _run(call, x._data, dim_arg, keepdim)
    return result(out, names_left, func)


def _empty_dims(name: str, x: _NT, phys, keepdim: bool):
    """``(x, phys, keepdim)`` for ``dim=()``: ``all``/``any`` reduce nothing, the others
    every positional dim (a scalar: a size-1 axis added, and no dim kept for it)."""
    if name in ("all", "any"):
        return x, phys, keepdim
    k = len(x._names)
    p = x._data.dim() - k
    if p:
        return x, tuple(range(k, k + p)), keepdim
    return _wrap_nt(x._data.unsqueeze(-1), x._names), (k,), False


def install() -> None:
    for name, (idx, multi) in REDUCTIONS.items():
        rule = _reduction(name, idx, multi)
        register([getattr(torch, name, None), getattr(_T, name, None)], rule, kind="reduction")
    register([torch.linalg.vector_norm], _reduction("vector_norm", 2, True), kind="reduction")
    register([torch.special.logsumexp], _reduction("logsumexp", 1, True), kind="reduction")
