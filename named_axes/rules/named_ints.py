"""Integer arguments that vary per instance (docs/guide.md §3): ``roll``'s ``shifts``,
``narrow``'s ``start``, ``index_select``'s and ``gather``'s ``index`` as named integers.

Each instance gets the op with its own integer, by index arithmetic and one
``take_along_dim``: no value is read into Python, so tracing and transforms work.  Where
values cannot be read (a traced graph, a vmapped start), ``narrow`` clamps its start as
``nx.lax.dynamic_slice_in_dim`` does instead of raising.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda v: torch.roll(v, nx.lax.axis_index('i')), in_axes=['i', ...],
...             out_axes=['i', ...])
>>> f(torch.arange(3.).repeat(3, 1))
tensor([[0., 1., 2.],
        [2., 0., 1.],
        [1., 2., 0.]])
"""
from __future__ import annotations

from typing import Any

import torch

from .._dispatch import ShapeError, result, vmap_fallback
from .._errors import AxisSpecError, AxisTypeError, fmt_named_shape
from .._layout import align, union_names
from .._modes import building_graph
from .._registry import register, spellings
from .._shape_errors import fmt_operand
from .._tensor import NamedTensor
from ._common import _norm_pos, _spelled, given

__all__ = ["install", "narrow", "index_select", "explain_index", "take_slice", "clamped_starts",
           "along", "check_embedding"]

_NT = NamedTensor
_T = torch.Tensor
_wrap_nt = NamedTensor._wrap
_MISSING = object()


def _is_tensor(v: Any) -> bool:
    return type(v) is _NT or isinstance(v, _T)


def _int_value(v: Any, op, arg: str) -> NamedTensor:
    """``v`` (a tensor or NamedTensor) as an integer NamedTensor; an error naming ``arg``."""
    s = v if type(v) is _NT else _wrap_nt(v, ())
    dt = s._data.dtype
    if dt == torch.bool or dt.is_floating_point or dt.is_complex:
        raise AxisTypeError(f"{_spelled(op)}: {arg} must hold integers, got dtype {dt}; "
                            f"cast it (.long())")
    return s


def _scalar(v: Any, op, arg: str) -> NamedTensor:
    s = _int_value(v, op, arg)
    if s.ndim:
        raise AxisSpecError(
            f"{_spelled(op)}: {arg} must be one integer per instance (positional shape ()), "
            f"got positional shape {tuple(s.shape)} with named shape "
            f"{fmt_named_shape(s.named_shape)}")
    return s


def _values_readable(data: _T) -> bool:
    """Whether ``data``'s values may be read here: an eager tensor, no graph being built."""
    return type(data) is _T and not data.is_meta and not building_graph()


def _first_bad(bad: _T, names: tuple) -> tuple | None:
    """The first instance (``{name: index}``) and position where ``bad`` holds, or None
    when it holds nowhere or the values cannot be read (a ``torch.func.vmap`` level)."""
    try:
        if not bool(bad.any()):
            return None
    except RuntimeError:   # a batched tensor: values are not readable here
        return None
    where = [int(i) for i in bad.nonzero()[0]]
    k = len(names)
    return {n: where[i] for i, n in enumerate(names)}, tuple(where[k:]), tuple(where)


# -- roll -------------------------------------------------------------------------------------

def _roll(func, args, kwargs):
    if not args or len(args) > 3 or set(kwargs) - {"shifts", "dims"}:
        return NotImplemented
    x, shifts, dims = given(args, kwargs, 0, input=None, shifts=_MISSING, dims=None)
    if shifts is _MISSING or not _is_tensor(x):
        return NotImplemented
    flat = dims is None or (isinstance(dims, (tuple, list)) and not dims)
    dim_list = [] if flat else list(dims) if isinstance(dims, (tuple, list)) else [dims]
    for d in dim_list:
        if _is_tensor(d):
            raise AxisTypeError(f"{_spelled(func)}: dims must be ints (positional dims), "
                                f"got a tensor")
        if isinstance(d, bool) or not isinstance(d, int):
            raise AxisSpecError(
                f"{_spelled(func)}: dims={dims!r}: roll shifts positional dims (ints); a "
                f"named axis has no order to roll along: shift its instances with "
                f"nx.lax.ppermute, or make it positional (nx.positional) first")
    shift_list = _shift_list(shifts, func)
    want = 1 if flat else len(dim_list)
    if len(shift_list) != want:
        raise ShapeError(
            f"{_spelled(func)}: shifts and dims must align: {len(shift_list)} shift(s) for "
            f"{'no dims (a flattened roll takes one shift)' if flat else f'dims={dims!r}'}")
    if type(x) is not _NT and not any(type(s) is _NT for s in shift_list):
        return NotImplemented
    return _roll_named(func, x if type(x) is _NT else _wrap_nt(x, ()), shift_list,
                       dim_list, flat)


def _shift_list(shifts, func) -> list:
    """The shifts, one entry per dim: ints as they are, tensors as integer NamedTensors."""
    if _is_tensor(shifts):
        s = _int_value(shifts, func, "shifts")
        if s.ndim == 0:
            return [s]
        if s.ndim != 1:
            raise AxisSpecError(
                f"{_spelled(func)}: shifts as a tensor must have positional shape () or "
                f"(number of dims,), got {fmt_operand(s)}")
        k = len(s._names)
        return [_wrap_nt(t, s._names) for t in s._data.unbind(k)]
    items = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    out = []
    for e in items:
        if _is_tensor(e):
            out.append(_scalar(e, func, "shifts"))
        elif isinstance(e, (bool, float, complex, str)) or e is None:
            raise AxisTypeError(
                f"{_spelled(func)}: shifts must be ints or integer values (a named one "
                f"shifts each instance by its own amount), got {e!r}")
        else:
            out.append(e)
    return out


def _roll_named(func, x: NamedTensor, shifts: list, dims: list, flat: bool):
    """out[j] = x[(j - shift) mod n]: an int shift by torch.roll, a named one by
    take_along_dim (with no dims: each instance's positional dims flattened)."""
    operands = [("input", x)] + [(f"shifts[{i}]" if len(shifts) > 1 else "shifts", s)
                                 for i, s in enumerate(shifts) if type(s) is _NT]
    U = union_names(operands, op=func)
    k, p = len(U), x.ndim
    data = align(x._data, x._names, p, U, p)
    shape = tuple(data.shape)
    if flat:
        data = data.reshape(shape[:k] + (-1,))
    for s, dd in zip(shifts, [k] if flat else [k + _norm_pos(d, p, func) for d in dims]):
        data = _shift(data, dd, s, U) if type(s) is _NT else torch.roll(data, s, dd)
    if flat:
        data = data.reshape(tuple(data.shape[:k]) + shape[k:])
    sizes = {}
    for _, v in operands:
        sizes.update(zip(v._names, v._data.shape))
    full = tuple(sizes[n] for n in U)
    if tuple(data.shape[:k]) != full:   # (an empty dim: nothing was gathered)
        data = data.expand(full + tuple(data.shape[k:]))
    return result(data, U, func)


def _shift(data: _T, dd: int, s: NamedTensor, U: tuple) -> _T:
    """``data`` (``[U..., positional]``) rolled along physical dim ``dd`` by ``s``."""
    n = data.shape[dd]
    if n == 0:
        return data
    k = len(U)
    sd = align(s._data, s._names, 0, U, 0).to(device=data.device, dtype=torch.long)
    idx = torch.remainder(torch.arange(n, device=data.device) - sd.unsqueeze(-1), n)
    return torch.take_along_dim(data, along(idx, dd - k, data.dim() - k), dd)


# -- narrow -----------------------------------------------------------------------------------

def narrow(func, args, kwargs):
    """``narrow`` with a tensor among its arguments (the dim-wise rule hands it over)."""
    if len(args) > 4 or set(kwargs) - {"input", "dim", "start", "length"}:
        return NotImplemented
    bound = given(args, kwargs, 0, input=_MISSING, dim=_MISSING, start=_MISSING, length=_MISSING)
    if any(v is _MISSING for v in bound):
        return NotImplemented
    x, dim, start, length = bound
    if _is_tensor(dim):
        raise AxisTypeError(f"{_spelled(func)}: dim must be a positional dim (an int), got a "
                            f"tensor ({fmt_operand(dim)})")
    if _is_tensor(length):
        raise AxisTypeError(
            f"{_spelled(func)}: length must be a Python int, got a tensor ({fmt_operand(length)}): "
            f"it sets the result's positional shape, which every instance shares. Narrow "
            f"to the longest length and mask the rest (torch.where) per instance")
    if not _is_tensor(x) or type(start) is not _NT:
        return NotImplemented
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise AxisSpecError(f"{_spelled(func)}: dim={dim!r}: narrow acts on a positional dim "
                            f"(an int); a named axis has one size")
    x = x if type(x) is _NT else _wrap_nt(x, ())
    s = _scalar(start, func, "start")
    union_names([("input", x), ("start", s)], op=func)
    d = _norm_pos(dim, x.ndim, func)
    n = x.shape[d]
    if isinstance(length, int) and not 0 <= length <= n:
        raise ShapeError(
            f"{_spelled(func)}: length {length} does not fit dim {dim} of size {n} "
            f"(input {fmt_operand(x)}); it must be in [0, {n}]")
    if _values_readable(s._data):
        _check_starts(func, x, s, dim, n, length)
    out = take_slice(x, d, s, length)
    return result(out._data, out._names, func)


# -- per-instance slices (narrow here; nx.lax.dynamic_slice and its family) ------------

def clamped_starts(s: NamedTensor, U: tuple, n: int, size: int, device: torch.device) -> torch.Tensor:
    """The start's data laid out ``[U...]`` (size 1 where it lacks a name), wrapped and
    clamped as JAX does, on the operand's ``device`` (an engine may keep index values,
    ``axis_index``, on the CPU beside operands on its devices)."""
    sd = align(s._data, s._names, 0, U, 0).to(device=device, dtype=torch.long)
    return torch.where(sd < 0, sd + n, sd).clamp(0, n - size)


def along(idx: torch.Tensor, d: int, p: int) -> torch.Tensor:
    """``idx`` (``[U..., m]``) reshaped so its last dim is positional dim ``d`` of ``p``."""
    m = idx.shape[-1]
    return idx.reshape(tuple(idx.shape[:-1]) + (1,) * d + (m,) + (1,) * (p - d - 1))


def take_slice(x: NamedTensor, d: int, s: NamedTensor, size: int) -> NamedTensor:
    """``x`` sliced along positional dim ``d`` at the per-instance start ``s`` (wrapped
    and clamped as JAX's ``dynamic_slice`` does; ``nx.lax``'s slicing is built on it)."""
    U = union_names([("operand", x), ("start index", s)], op="dynamic_slice")
    p, n = x.ndim, x.shape[d]
    xd = align(x._data, x._names, p, U, p)
    start = clamped_starts(s, U, n, size, xd.device)
    if size == 0 or xd.numel() == 0:   # nothing to read (torch-xla's gather lowering
        # refuses an empty slice or operand): the result's shape, no values
        k = len(U)
        empty = xd.narrow(k + d, 0, size)
        sizes = torch.broadcast_shapes(tuple(start.shape), tuple(xd.shape[:k]))
        return NamedTensor._wrap(empty.expand(tuple(sizes) + tuple(empty.shape[k:])), U)
    idx = torch.arange(size, device=xd.device) + start.unsqueeze(-1)
    return NamedTensor._wrap(torch.take_along_dim(xd, along(idx, d, p), len(U) + d), U)


def _check_starts(func, x: NamedTensor, s: NamedTensor, dim: int, n: int, length: int) -> None:
    """torch's rule per instance: ``-n <= start <= n`` and ``start + length <= n`` after a
    negative start is counted from the end."""
    sd = s._data
    wrapped = torch.where(sd < 0, sd + n, sd)
    hit = _first_bad((wrapped < 0) | (wrapped + length > n), s._names)
    if hit is None:
        return
    instance, _, at = hit
    value = int(sd[at])
    raise ShapeError(
        f"{_spelled(func)}: start is out of range at instance {instance}: start {value} with "
        f"length {length} does not fit dim {dim} of size {n} (each instance needs a start "
        f"in [0, {n - length}], or one in [{-n}, {-length}] counting from the end).\n"
        f"  input: {fmt_operand(x)}\n  start: {fmt_operand(s)}\n"
        f"Fix the start, or use nx.lax.dynamic_slice_in_dim, which clamps it into range "
        f"(JAX's rule)")


# -- index_select / gather --------------------------------------------------------------------

def index_select(func, args, kwargs):
    """``index_select`` with a named index (or a plain input): per instance of the names.

    A 0-d index selects like a one-element 1-D index (torch's rule per instance;
    functorch's batching rule reads the batched index as 1-D)."""
    index = given(args, kwargs, 2, index=None)[0]
    if type(index) is _NT and index.ndim == 0:
        index = index.unsqueeze(0)
        if len(args) > 2:
            args = (*args[:2], index, *args[3:])
        else:
            kwargs = {**kwargs, "index": index}
    return _per_instance_index(func, args, kwargs)


def _per_instance_index(func, args, kwargs):
    """The op under the vmap fallback; an index out of range explained by instance."""
    try:
        return vmap_fallback(func, args, kwargs)
    except (RuntimeError, IndexError):
        explain_index(func, args, kwargs)
        raise


def explain_index(func, args, kwargs) -> None:
    """Raise ShapeError naming the instance when ``index`` holds a value outside the dim."""
    x, dim, index = given(args, kwargs, 0, input=None, dim=None, index=None)
    if not (_is_tensor(x) and _is_tensor(index) and isinstance(dim, int)) or \
            index.dtype == torch.bool:
        return
    p = x.ndim if type(x) is _NT else x.dim()
    if -max(p, 1) <= dim < max(p, 1):
        _check_range(func, x, index, dim, x.shape[dim] if p else 1, 0)


def _check_range(func, x, index, dim: int, n: int, lo: int, label: str = "input") -> None:
    """Raise ShapeError naming the instance where ``index`` holds a value outside
    ``[lo, n)`` (``lo``: ``-n`` where torch counts a negative index from the end); no
    check where its values cannot be read or are not integers."""
    data = index._data if type(index) is _NT else index
    if not _values_readable(data) or data.dtype.is_floating_point:
        return
    inames = index._names if type(index) is _NT else ()
    hit = _first_bad((data < lo) | (data >= n), inames)
    if hit is None:
        return
    instance, pos, at = hit
    where = f"instance {instance}, position {pos}" if inames else f"position {pos}"
    raise ShapeError(
        f"{_spelled(func)}: index is out of range at {where}: "
        f"it holds {int(data[at])}, but dim {dim} has size {n} (indices must be in "
        f"[{lo}, {n - 1}]).\n  {label}: {fmt_operand(x)}\n  index: {fmt_operand(index)}") from None


def check_embedding(func, args, kwargs) -> None:
    """``F.embedding`` with a named weight: functorch's batching rule offsets the indices
    into the instances' stacked rows unchecked, so one out of range read another
    instance's row.  Checked here (where the values can be read), per instance."""
    index, weight = given(args, kwargs, 0, input=None, weight=None)
    if type(weight) is not _NT or not weight._names or weight.ndim != 2 or not _is_tensor(index):
        return
    _check_range(func, weight, index, 0, weight.shape[0], 0, "weight")


def _index_fill(func, args, kwargs):
    """``index_fill`` with a named index.  torch's batching rule offsets each instance's
    index unchecked: a negative one is not counted from the end and one out of range
    fills another instance; so the index is checked (where its values can be read) and
    wrapped here, per instance."""
    x, dim, index = given(args, kwargs, 0, input=None, dim=None, index=None)
    p = x.ndim if _is_tensor(x) else 0
    if type(index) is not _NT or not isinstance(dim, int) or not -max(p, 1) <= dim < max(p, 1):
        return NotImplemented
    n = x.shape[dim] if p else 1
    _check_range(func, x, index, dim, n, -n)
    index = _wrap_nt(torch.where(index._data < 0, index._data + n, index._data), index._names)
    if len(args) > 2:
        return vmap_fallback(func, (*args[:2], index, *args[3:]), kwargs)
    return vmap_fallback(func, args, {**kwargs, "index": index})


def install() -> None:
    register(spellings("roll"), _roll, kind="named_int")
    register(spellings("gather"), _per_instance_index, kind="named_int")
    register(spellings("index_fill") + [torch.Tensor.index_fill_], _index_fill, kind="named_int")
