"""Writes into tensors that already exist: in-place ops and ``out=``, one rule for both.

A write keeps its target's named shape (vmap's rule): the value written may not carry a
named axis the target lacks (every instance of it would write into the one target).
``out=`` receives the result the op gives without it: its named shape (names in any
order), torch's resizing and casting rules.  A write whose target overlaps another
operand within one instance is refused, as torch refuses each instance's write.

>>> import torch, named_axes as nx
>>> a = nx.named(torch.ones(2, 3), 'N ...')
>>> out = nx.named(torch.empty(2, 3), 'N ...')
>>> torch.abs(-a, out=out) is out, out.named_shape
(True, {'N': 2})
>>> torch.ones(3).mul_(a)
Traceback (most recent call last):
 ...
named_axes._errors.AxisSizeError: Tensor.mul_: in-place update of a plain tensor ... first
"""
from __future__ import annotations

import itertools
import math
import warnings
from typing import Any, Callable

import torch

from ._errors import AxisSizeError, fmt_named_shape
from ._layout import align
from ._modes import observed
from ._registry import op_name
from ._tensor import NamedTensor, data_and_names
from ._torch_private import is_functorch_wrapped, tree_flatten, tree_unflatten

__all__ = ["check_inplace", "check_apart", "check_overlap", "write_out"]

_NT = NamedTensor


def _leaves(values):
    """The tensors and NamedTensors among ``values`` and in (nested) lists of them."""
    for v in values:
        if type(v) in (list, tuple):
            yield from _leaves(v)
        elif isinstance(v, (torch.Tensor, _NT)):
            yield v


def check_inplace(func: Callable, args: tuple, kwargs: dict) -> None:
    """Refuse an in-place op whose operands carry a named axis its target lacks."""
    if not args:
        return
    target = args[0]
    if type(target) in (list, tuple):          # the foreach ops: pairwise targets
        for i, t in enumerate(target):
            paired = [a[i] if type(a) in (list, tuple) and len(a) == len(target) else a
                      for a in args[1:]]
            check_inplace(func, (t, *paired), kwargs)
        return
    axes = {n: size for v in _leaves((*args[1:], *(v for k, v in kwargs.items() if k != "out")))
            if type(v) is _NT for n, size in v.named_shape.items()}
    have = target._names if type(target) is _NT else ()
    missing = [n for n in axes if n not in have]
    if missing:
        what = (f"a value with named shape {fmt_named_shape(target.named_shape)}"
                if type(target) is _NT else f"a plain tensor of shape {tuple(target.shape)}")
        raise AxisSizeError(
            f"{op_name(func)}: in-place update of {what} by a value with named axis "
            f"{missing[0]!r} (size {axes[missing[0]]}) would write every instance of that axis "
            f"into it; compute a new value instead (x = x + y, not x += y or x.add_(y)), or "
            f"give the target the axis first")
    if have:
        check_apart(func, target)
    if axes or have:
        check_overlap(func, args, kwargs)


def check_apart(func: Callable, written) -> None:
    """Refuse a write into a named value whose instances share memory (a named dim of
    stride 0 from ``expand``, windows of ``as_strided``): each instance would write into
    the others', as torch refuses a write in which "more than one element of the
    written-to tensor refers to a single memory location"."""
    if torch.compiler.is_dynamo_compiling():   # (an eager check, as check_overlap's)
        return
    data, k = _plain_data(written), len(written._names)
    if data is None or not data.numel():
        return
    span = 0   # each stride past the span of the smaller ones: all apart
    for st, n in sorted((abs(st), n) for n, st in zip(data.shape, data.stride()) if n > 1):
        if st <= span:
            break
        span += (n - 1) * st
    else:
        return
    at = torch.zeros((), dtype=torch.long)   # else each element's offset and instance
    for n, st in zip(data.shape, data.stride()):
        at = at[..., None] + torch.arange(n) * st
    instance = torch.arange(math.prod(data.shape[:k])).reshape(data.shape[:k] + (1,) * (
        data.dim() - k)).expand(data.shape)
    pairs = torch.unique(torch.stack([at.flatten(), instance.flatten()], 1), dim=0)
    if len(torch.unique(pairs[:, 0])) < len(pairs):
        raise AxisSizeError(
            f"{op_name(func)}: the written value (named shape "
            f"{fmt_named_shape(written.named_shape)}) has instances of its named axes that "
            f"share memory (strides {tuple(data.stride())}, as expand() gives), so each would "
            f"write into another's; torch refuses such a write (more than one element of "
            f"the written-to tensor refers to a single memory location): clone() it first")


def _plain_data(v):
    """The strided eager tensor behind ``v`` (None: anything else)."""
    d = v._data if type(v) is _NT else v
    ok = type(d) is torch.Tensor and d.layout == torch.strided and not d.is_meta and \
        not is_functorch_wrapped(d)
    return d if ok else None


def check_overlap(func: Callable, args: tuple, kwargs: dict, out=None) -> None:
    """An in-place op whose target (or ``out``, the out= tensor) shares memory with
    another operand: the first instance runs on a copy of that memory, so that torch
    refuses a write the per-instance loop would refuse (``n[..., 1:].copy_(n[..., :2])``:
    within one instance the two overlap) instead of the whole tensor being written at once."""
    if torch.compiler.is_dynamo_compiling():
        return
    written = args[0] if out is None else out
    others = [v._data if type(v) is _NT else v
              for v in _leaves((*args[out is None:], *kwargs.values()))]
    if not others or observed():
        return
    target = _plain_data(written)
    if target is None:
        return
    memory = target.untyped_storage()
    try:
        ptr = memory.data_ptr()
    except RuntimeError:   # a lazy device's tensor (XLA): no address, no overlap to emulate
        return

    def shares(d) -> bool:
        return (d is not None and d is not target and d.device == target.device
                and d.untyped_storage().data_ptr() == ptr)

    if not ptr or not any(shares(_plain_data(d)) for d in others):
        return
    flat, spec = tree_flatten((args, kwargs))
    sharing = [shares(_plain_data(v)) for v in flat]
    if any(d and _plain_data(v).dtype != target.dtype for v, d in zip(flat, sharing)):
        return   # (a view of the memory as another dtype: not emulated)
    copy = torch.empty(0, dtype=target.dtype, device=target.device)
    copy.set_(memory.clone(), 0, (memory.nbytes() // target.element_size(),), (1,))
    first = []
    for v, shared in zip(flat, sharing):
        d = _plain_data(v)
        if d is not None and type(v) is _NT:
            d = d[(0,) * len(v._names)]
        if d is not None and (shared or _plain_data(v) is target):
            d = copy.as_strided(d.shape, d.stride(), d.storage_offset())
        first.append(d if d is not None else v)
    a, kw = tree_unflatten(first, spec)
    try:
        devices = [target.device.index or 0] if target.is_cuda else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            func(*a, **kw)
    except RuntimeError as e:
        if "single memory location" not in str(e):
            return
        raise AxisSizeError(
            f"{op_name(func)}: the target and another operand share memory that overlaps "
            f"within one instance of the named axes, and torch refuses such a write on each "
            f"instance ({str(e).splitlines()[0]}); clone() the operand first") from None


def write_out(func: Callable, args: tuple, kwargs: dict, compute: Callable) -> Any:
    """``func(*args, **kwargs)`` with ``out=``: ``compute`` gives the result without it,
    which is then written into ``out`` (one tensor or a tuple of them)."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    if torch.is_grad_enabled() and any(t.requires_grad for t in _leaves((*args, *kwargs.values()))):
        raise AxisSizeError(
            f"{op_name(func)}: functions with out=... arguments don't support automatic "
            f"differentiation (torch's rule), but an argument requires grad; drop out=")
    for o in out if type(out) in (list, tuple) else (out,):
        if type(o) is _NT and o._names:
            check_apart(func, o)
        check_overlap(func, args, {**kwargs, "out": out}, o)
    result = compute(func, args, kwargs)
    if type(out) in (list, tuple):
        results = result if isinstance(result, (list, tuple)) else (result,)
        if len(results) != len(out):
            raise AxisSizeError(f"{op_name(func)}: out= has {len(out)} tensors but the op "
                                f"returns {len(results)}")
        for r, o in zip(_in_out_dtypes(func, args, kwargs, results, out), out):
            _write(func, r, o)
        return out if type(results) in (list, tuple) else type(results)(out)
    _write(func, _in_out_dtypes(func, args, kwargs, (result,), (out,))[0], out)
    return out


def _in_out_dtypes(func: Callable, args: tuple, kwargs: dict, results, outs) -> tuple:
    """``results``, or where an out= has another dtype, torch's own out= call run once per
    instance: torch computes some ops in their out's dtype (``sum``, ``cumsum``, ``mean``,
    ``logsumexp``: the input cast first), casts others' results, and refuses the rest, so
    the cast of the result computed without out= is not each instance's answer."""
    if all(r.dtype == o.dtype for r, o in zip(results, outs)):
        return results
    data, names = data_and_names(results[0])
    flat, spec = tree_flatten((args, kwargs))
    if any(type(v) is _NT and not set(v._names) <= set(names) for v in flat) or any(
            data_and_names(r)[1] != names for r in results):
        return results   # (a reduction over a named axis: no loop over instances)
    tmps = tuple(torch.empty_like(data_and_names(r)[0], dtype=o.dtype)
                 for r, o in zip(results, outs))
    for index in itertools.product(*map(range, data.shape[:len(names)])):
        at = dict(zip(names, index))
        a, kw = tree_unflatten([v._data[tuple(at[n] for n in v._names)] if type(v) is _NT
                                else v for v in flat], spec)
        try:
            func(*a, **kw, out=tuple(t[index] for t in tmps) if len(tmps) > 1 else tmps[0][index])
        except RuntimeError as e:
            raise AxisSizeError(f"{op_name(func)}: {str(e).splitlines()[0]} (torch's rule for "
                                f"each instance's out=)") from None
    return tuple(NamedTensor._wrap(t, names) if names else t for t in tmps)


def _write(func: Callable, r, o) -> None:
    """Write result ``r`` into ``o`` under torch's out= rules, named shapes kept."""
    r_axes = r.named_shape if type(r) is _NT else {}
    o_axes = o.named_shape if type(o) is _NT else {}
    if r_axes != o_axes:
        raise AxisSizeError(
            f"{op_name(func)}: out= has named shape {fmt_named_shape(o_axes)} but the result "
            f"has {fmt_named_shape(r_axes)}; out= must have the result's named axes and "
            f"sizes (any order)" + ("" if o_axes else
                                    ": a plain tensor cannot receive named axes"))
    if not torch.can_cast(r.dtype, o.dtype):
        raise AxisSizeError(f"{op_name(func)}: result type {r.dtype} can't be cast to the "
                            f"desired output type {o.dtype} of out= (torch's rule)")
    o_data, o_names = data_and_names(o)
    r_data, r_names = data_and_names(r)
    held, have = dict(zip(r_names, r_data.shape)), dict(zip(o_names, o_data.shape))
    parts = [n for n in held if held[n] != have[n]]
    if parts:
        n = parts[0]
        raise AxisSizeError(
            f"{op_name(func)}: out= holds {have[n]} entries of axis {n!r} but the result holds "
            f"{held[n]} of them here (a SerialLoop chunk or a mesh shard computes part of "
            f"the axis, and out= was made outside the xmap body); make out= inside the body "
            f"or drop out=")
    shape = tuple(r.shape)
    if tuple(o.shape) != shape:
        if o_data.numel():
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(o.shape)}, which does not match the required output "
                          f"shape {list(shape)} (torch's out= rule)", UserWarning, stacklevel=4)
        o_data.resize_(tuple(o_axes[n] for n in o_names) + shape)
    o_data.copy_(align(r_data, r_names, r.ndim, o_names, r.ndim))
