"""``nx.lax`` slicing and shape ops with the signatures of ``jax.lax`` (JAX 0.4.30 semantics).

The positional dims are what a function sees; named axes broadcast by name.  A start is
a Python int or an integer 0-d value, possibly named (``axis_index('i') * 4``: one start
per instance, by ``take_along_dim``, never read into Python).  As in JAX a negative start
wraps once, then every start is clamped into ``[0, dim - slice size]``.

>>> import torch, named_axes as nx
>>> nx.lax.dynamic_slice(torch.arange(16), [24], [8])     # start clamped to 8
tensor([ 8,  9, 10, 11, 12, 13, 14, 15])
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import torch

from .._dispatch import result
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from .._engine import handed
from .._layout import align, union_names
from .._tensor import NamedTensor
from .._tape import taped
from ..rules.named_ints import along as _along
from ..rules.named_ints import clamped_starts as _clamp
from ..rules.named_ints import take_slice as _take
from ._common import _as_named, _norm, _norm_dims

__all__ = ["dynamic_slice", "dynamic_slice_in_dim", "dynamic_index_in_dim",
           "dynamic_update_slice", "dynamic_update_slice_in_dim",
           "dynamic_update_index_in_dim", "squeeze", "expand_dims"]

_NT = NamedTensor


def _index(s: Any, op: str, d: int) -> Any:
    """One start index: a Python int, or an integer 0-d NamedTensor (maybe without names)."""
    if isinstance(s, numbers.Integral) and not isinstance(s, bool):
        return int(s)
    if not isinstance(s, (torch.Tensor, _NT)):
        raise AxisTypeError(f"{op}: start index {d} must be an integer or an integer 0-d "
                            f"tensor, got {type(s).__name__}")
    s = _as_named(s, op, f"start index {d}")
    dt = s._data.dtype
    if dt == torch.bool or dt.is_floating_point or dt.is_complex or s.ndim:
        raise AxisTypeError(
            f"{op}: start index {d} must be an integer scalar (positional shape ()), got "
            f"dtype {dt} and positional shape {tuple(s.shape)}; a named index such as "
            f"nx.lax.axis_index('i') * k is fine")
    return s


def _starts(start_indices: Any, p: int, op: str, shape: tuple) -> list:
    if isinstance(start_indices, (torch.Tensor, _NT)):
        s = _as_named(start_indices, op, "start_indices")
        if s.ndim != 1:
            raise AxisSpecError(f"{op}: start_indices as a tensor must have one positional "
                                f"dim, got positional shape {tuple(s.shape)}")
        k = len(s._names)
        start_indices = [NamedTensor._wrap(t, s._names) for t in s._data.unbind(k)]
    starts = list(start_indices)
    if len(starts) != p:
        raise AxisSpecError(f"{op}: got {len(starts)} start indices for an operand with "
                            f"positional shape {shape}; give one start per positional dim")
    return [_index(s, op, d) for d, s in enumerate(starts)]


def _clamp_static(s: int, n: int, size: int) -> int:
    return min(max(s + n if s < 0 else s, 0), n - size)


def _sizes(slice_sizes: Any, shape: tuple, op: str) -> list:
    sizes = [int(s) for s in slice_sizes]
    if len(sizes) != len(shape):
        raise AxisSpecError(f"{op}: got {len(sizes)} slice sizes for an operand with "
                            f"positional shape {shape}")
    if any(not 0 <= s <= n for s, n in zip(sizes, shape)):
        raise AxisSizeError(f"{op}: slice_sizes {tuple(sizes)} must be between 0 and the "
                            f"operand's positional shape {shape}; make them smaller")
    return sizes


@taped("linear")
def dynamic_slice(operand: Any, start_indices: Sequence, slice_sizes: Sequence[int]) -> Any:
    """``operand[start:start + size]`` along every positional dim (``jax.lax.dynamic_slice``).

    Starts wrap once if negative and are clamped into range; a named start gives every
    instance its own slice.

    >>> import torch, named_axes as nx
    >>> x = torch.arange(12).reshape(3, 4)
    >>> nx.lax.dynamic_slice(x, [-1, 1], [2, 2])            # -1 wraps to 2, clamped to 1
    tensor([[ 5,  6],
            [ 9, 10]])
    >>> f = lambda: nx.lax.dynamic_slice(torch.arange(10), [nx.lax.axis_index('i') * 3], [4])
    >>> nx.xmap(f, in_axes=[], out_axes=['i', ...], axis_sizes={'i': 3})()
    tensor([[0, 1, 2, 3],
            [3, 4, 5, 6],
            [6, 7, 8, 9]])
    """
    x = _as_named(operand, "dynamic_slice", "operand")
    shape = tuple(x.shape)
    starts = _starts(start_indices, len(shape), "dynamic_slice", shape)
    sizes = _sizes(slice_sizes, shape, "dynamic_slice")
    every = x._names + tuple(n for s in starts for n in getattr(s, "_names", ())
                             if n not in x._names)   # per-instance starts: each its slice
    x = NamedTensor._wrap(handed(x._data, x._names, every), x._names)
    for d, (s, size) in enumerate(zip(starts, sizes)):
        if isinstance(s, int):
            if size != shape[d]:
                k = len(x._names)
                data = x._data.narrow(k + d, _clamp_static(s, shape[d], size), size)
                x = NamedTensor._wrap(data, x._names)
        else:
            x = _take(x, d, s, size)
    return result(x._data, x._names, dynamic_slice)


def _in_dim(operand: Any, start: Any, axis: int, op: str) -> tuple:
    p = _as_named(operand, op, "operand").ndim
    axis = _norm(axis, p, op, "axis")
    return [start if d == axis else 0 for d in range(p)], axis


@taped("linear")
def dynamic_slice_in_dim(operand: Any, start_index: Any, slice_size: int, axis: int = 0) -> Any:
    """:func:`dynamic_slice` along one positional dim (``jax.lax.dynamic_slice_in_dim``).

    >>> import torch, named_axes as nx
    >>> nx.lax.dynamic_slice_in_dim(torch.arange(6).reshape(2, 3), 1, 2, axis=1)
    tensor([[1, 2],
            [4, 5]])
    """
    starts, axis = _in_dim(operand, start_index, axis, "dynamic_slice_in_dim")
    sizes = list(_as_named(operand, "dynamic_slice_in_dim", "operand").shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, starts, sizes)


@taped("linear")
def dynamic_index_in_dim(operand: Any, index: Any, axis: int = 0, keepdims: bool = True) -> Any:
    """The entry ``index`` along positional dim ``axis`` (``jax.lax.dynamic_index_in_dim``).

    >>> import torch, named_axes as nx
    >>> nx.lax.dynamic_index_in_dim(torch.arange(6).reshape(2, 3), -1, axis=1, keepdims=False)
    tensor([2, 5])
    """
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return squeeze(out, [axis]) if not keepdims else out


def _update_checks(x: NamedTensor, u: NamedTensor, op: str) -> None:
    if u.ndim != x.ndim or any(m > n for m, n in zip(u.shape, x.shape)):
        raise AxisSizeError(f"{op}: the update's positional shape {tuple(u.shape)} must have "
                            f"the operand's rank and fit in its shape {tuple(x.shape)}")
    if u._data.dtype != x._data.dtype:
        raise AxisTypeError(f"{op}: operand and update must have one dtype, got "
                            f"{x._data.dtype} and {u._data.dtype}; cast the update")


@taped("linear")
def dynamic_update_slice(operand: Any, update: Any, start_indices: Sequence) -> Any:
    """``operand`` with ``update`` written at ``start_indices`` (``jax.lax.dynamic_update_slice``).

    Out of place; starts wrap and clamp as in :func:`dynamic_slice`.  The result carries
    the named axes of the operand, the update and the starts.

    >>> import torch, named_axes as nx
    >>> nx.lax.dynamic_update_slice(torch.zeros(6), torch.ones(2), [5])   # clamped to 4
    tensor([0., 0., 0., 0., 1., 1.])
    """
    op = "dynamic_update_slice"
    x, u = _as_named(operand, op, "operand"), _as_named(update, op, "update")
    _update_checks(x, u, op)
    p, shape = x.ndim, tuple(x.shape)
    starts = _starts(start_indices, p, op, shape)
    named = [("start index", s) for s in starts if not isinstance(s, int)]
    U = union_names([("operand", x), ("update", u)] + named, op=op)
    x = NamedTensor._wrap(handed(x._data, x._names, U), x._names)   # (a mesh engine's sums)
    g = align(handed(u._data, u._names, U), u._names, p, U, p)
    if 0 in tuple(u.shape):     # nothing is written: a copy of the operand, named as usual
        xd = align(x._data, x._names, p, U, p)
        lead = torch.broadcast_shapes(xd.shape[:len(U)], g.shape[:len(U)],
                                      *(align(s._data, s._names, 0, U, 0).shape for _, s in named))
        return result(xd.expand(lead + xd.shape[len(U):]).clone(), U, dynamic_update_slice)
    mask = torch.ones((), dtype=torch.bool, device=g.device)
    for d, s in enumerate(starts):          # g: the update placed at the start along dim d
        n, m = shape[d], u.shape[d]
        if isinstance(s, int):
            lo = _clamp_static(s, n, m)
            g = torch.nn.functional.pad(g, [0, 0] * (p - 1 - d) + [lo, n - lo - m])
            rel = torch.arange(n, device=g.device).reshape((1,) * len(U) + (n,)) - lo
        else:
            rel = torch.arange(n, device=g.device) - _clamp(s, U, n, m, g.device).unsqueeze(-1)
            g = torch.take_along_dim(g, _along(rel.clamp(0, m - 1), d, p), len(U) + d)
        mask = mask & _along((rel >= 0) & (rel < m), d, p)
    return result(torch.where(mask, g, align(x._data, x._names, p, U, p)), U,
                  dynamic_update_slice)


@taped("linear")
def dynamic_update_slice_in_dim(operand: Any, update: Any, start_index: Any, axis: int) -> Any:
    """:func:`dynamic_update_slice` along one positional dim.

    >>> import torch, named_axes as nx
    >>> nx.lax.dynamic_update_slice_in_dim(torch.zeros(2, 3), torch.ones(2, 1), -1, axis=1)
    tensor([[0., 0., 1.],
            [0., 0., 1.]])
    """
    starts, _ = _in_dim(operand, start_index, axis, "dynamic_update_slice_in_dim")
    return dynamic_update_slice(operand, update, starts)


@taped("linear")
def dynamic_update_index_in_dim(operand: Any, update: Any, index: Any, axis: int) -> Any:
    """Write ``update`` at entry ``index`` of positional dim ``axis``; an update one rank
    lower gets the dim added (``jax.lax.dynamic_update_index_in_dim``).

    >>> import torch, named_axes as nx
    >>> nx.lax.dynamic_update_index_in_dim(torch.zeros(3, 2), torch.ones(2), 5, 0)
    tensor([[0., 0.],
            [0., 0.],
            [1., 1.]])
    """
    op = "dynamic_update_index_in_dim"
    _, axis = _in_dim(operand, index, axis, op)
    if _as_named(update, op, "update").ndim == _as_named(operand, op, "operand").ndim - 1:
        update = expand_dims(update, [axis])
    return dynamic_update_slice_in_dim(operand, update, index, axis)


@taped("linear")
def squeeze(array: Any, dimensions: Sequence[int]) -> Any:
    """Remove positional dims of size 1 (``jax.lax.squeeze``); named axes are untouched.

    >>> import torch, named_axes as nx
    >>> nx.lax.squeeze(torch.ones(1, 3, 1), [0, -1]).shape
    torch.Size([3])
    """
    x = _as_named(array, "squeeze", "array")
    dims = _norm_dims(dimensions, x.ndim, "squeeze", "dimension")
    if any(x.shape[d] != 1 for d in dims):
        raise AxisSizeError(f"squeeze: cannot squeeze out a dim whose size is not 1, got "
                            f"positional shape {tuple(x.shape)} and dimensions {tuple(dimensions)}")
    k = len(x._names)
    data = x._data.squeeze(tuple(k + d for d in dims)) if dims else x._data
    return result(data, x._names, squeeze)


@taped("linear")
def expand_dims(array: Any, dimensions: Sequence[int]) -> Any:
    """Insert positional dims of size 1 at ``dimensions`` of the result (``jax.lax.expand_dims``).

    >>> import torch, named_axes as nx
    >>> nx.lax.expand_dims(torch.ones(2, 3), [0, -1]).shape
    torch.Size([1, 2, 3, 1])
    """
    x = _as_named(array, "expand_dims", "array")
    dims = _norm_dims(dimensions, x.ndim + len(dimensions), "expand_dims", "dimension")
    data, k = x._data, len(x._names)
    for d in sorted(dims):
        data = data.unsqueeze(k + d)
    return result(data, x._names, expand_dims)
