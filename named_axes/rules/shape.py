"""Rules for shape ops, indexing and concatenation: each rewrites the call for the
physical layout ``[named..., positional...]`` (positional dims shift by the number of
named dims, shapes gain the named sizes in front).

>>> import torch, named_axes as nx
>>> x = nx.named(torch.zeros(2, 3, 4), {0: 'b'})
>>> x.transpose(0, 1).shape, x.flatten().shape
(torch.Size([4, 3]), torch.Size([12]))
"""
from __future__ import annotations

import functools
import math

import torch

from .._dispatch import ShapeError, UseFallback, result, wrap
from .._registry import op_name, register
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError, fmt_named_shape
from .._layout import align, union_names
from ._common import _norm_pos, first_only, given, instance_invalid, on_data
from .._tensor import NamedTensor
from .._writes import check_apart

_NT = NamedTensor
_T = torch.Tensor


def _int_dims(dims, op):
    for d in dims:
        if not isinstance(d, int):
            raise AxisSpecError(
                f"{op}: {d!r} is not a positional dimension; shape ops rearrange positional "
                f"axes only (named axes have no order)")


def _shape_args(rest, kwargs, key="size"):
    if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)):
        return tuple(rest[0])
    if rest:
        return tuple(rest)
    return tuple(kwargs.get(key, kwargs.get("shape", ())))


def _named_sizes(x):
    return tuple(x._data.shape[:len(x._names)])


# -- shape ops --------------------------------------------------------------------

def _view(func, args, kwargs):
    x = args[0]
    if func in (torch.Tensor.view_as, torch.Tensor.reshape_as) and type(x) is _NT and \
            type(args[1]) is not _NT:
        func = torch.Tensor.view if func is torch.Tensor.view_as else torch.Tensor.reshape
        args = (x, tuple(args[1].shape))
    if not first_only(args, kwargs):
        return NotImplemented
    rest = args[1:]
    if len(rest) == 1 and isinstance(rest[0], torch.dtype) or "dtype" in kwargs:
        if not x.ndim:   # a new element size resizes the last dim: one of the named ones
            instance_invalid(func, args, kwargs)
        return wrap(func(x._data, *rest, **kwargs), x._names)
    shape = _instance_shape(x, _shape_args(rest, kwargs), func)
    return result(func(x._data, _named_sizes(x) + shape), x._names, func)


def _instance_shape(x, shape: tuple, func) -> tuple:
    """``shape`` checked against one instance's size (its -1 worked out) when a named axis
    has size 0: torch, seeing 0 elements, would take any shape."""
    if math.prod(_named_sizes(x)) != 0:
        return shape
    n, known = math.prod(x.shape), math.prod(d for d in shape if d != -1)
    if -1 in shape and known and n % known == 0:
        shape = tuple(n // known if d == -1 else d for d in shape)
    if -1 in shape or math.prod(shape) != n:
        raise ShapeError(f"{op_name(func)}: shape {list(shape)} is invalid for an instance of "
                         f"{n} elements (positional shape {tuple(x.shape)}; named shape "
                         f"{x.named_shape})")
    return shape


def _expand(func, args, kwargs):
    x = args[0]
    if not first_only(args, kwargs):
        return NotImplemented
    if func is torch.Tensor.expand_as:
        sizes = tuple(args[1].shape)
    else:
        sizes = _shape_args(args[1:], kwargs)
    k, p = len(x._names), x.ndim
    if len(sizes) < p:
        raise ShapeError(f"{op_name(func)}: {len(sizes)} sizes given for a value with "
                         f"{p} positional dims (shape {tuple(x.shape)})")
    data = x._data
    new = len(sizes) - p
    if new:
        if -1 in sizes[:new]:
            instance_invalid(func, args, kwargs)
        data = data.reshape(_named_sizes(x) + (1,) * new + tuple(x.shape))
    return result(data.expand((-1,) * k + sizes), x._names, func)


def _data_dims(x, dims, op: str) -> list:
    """The positional ``dims`` of named ``x`` (ints, checked) as dims of its data."""
    _int_dims(dims, op)
    k, p = len(x._names), x.ndim
    return [k + _norm_pos(d, p, op) for d in dims]


def _permute(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    dims, op = _shape_args(args[1:], kwargs, key="dims"), op_name(func)
    _int_dims(dims, op)
    if len(dims) != x.ndim:
        raise ShapeError(f"{op}: {len(dims)} dims {dims} for a value with {x.ndim} "
                         f"positional dims")
    perm = list(range(len(x._names))) + _data_dims(x, dims, op)
    return result(x._data.permute(perm), x._names, func)


def _transpose(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    dims = given(args, kwargs, dim0=None, dim1=None)
    return result(func(x._data, *_data_dims(x, dims, op_name(func))), x._names, func)


def _t(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    k, p = len(x._names), x.ndim
    if p > 2:
        raise ShapeError(f"{op_name(func)} expects a value with <= 2 positional dims, got {p}")
    return result(x._data.transpose(k, k + 1) if p == 2 else x._data, x._names, func)


def _flatten(func, args, kwargs):
    x = args[0]
    if not first_only(args, kwargs):
        return NotImplemented
    dims, op = given(args, kwargs, start_dim=0, end_dim=-1), op_name(func)
    if x.ndim == 0:
        _int_dims(dims, op)
        for d in dims:
            if d not in (-1, 0):   # (-1 and 0 name the scalar itself, as in torch)
                _norm_pos(d, 0, op)   # raises: out of range
        return result(x._data.reshape(_named_sizes(x) + (1,)), x._names, func)
    return result(x._data.flatten(*_data_dims(x, dims, op)), x._names, func)


def _reshaped(x, out: torch.Tensor, func, in_place: bool):
    """``out`` named as ``x``; for the in-place form (``squeeze_``) ``x`` now holding it."""
    if in_place:
        x._data = out
        return x
    return result(out, x._names, func)


def _squeeze(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None:
        dims = tuple(len(x._names) + i for i, s in enumerate(x.shape) if s == 1)
    else:
        ds = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        dims = tuple(_data_dims(x, ds, op_name(func)))
    return _reshaped(x, x._data.squeeze(dims) if dims else x._data, func,
                     func is torch.Tensor.squeeze_)


def _unsqueeze(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    d, op = given(args, kwargs, dim=None)[0], op_name(func)
    _int_dims((d,), op)
    d = len(x._names) + _norm_pos(d, x.ndim + 1, op)
    return _reshaped(x, x._data.unsqueeze(d), func, func is torch.Tensor.unsqueeze_)


def _movedim(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    op = op_name(func)
    src, dst = (list(ds) if isinstance(ds, (list, tuple)) else [ds]
                for ds in given(args, kwargs, source=None, destination=None))
    _int_dims(src + dst, op)
    return result(torch.movedim(x._data, _data_dims(x, src, op), _data_dims(x, dst, op)),
                  x._names, func)


def _flip(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    dims = _data_dims(x, _shape_args(args[1:], kwargs, key="dims"), op_name(func))
    return result(torch.flip(x._data, dims), x._names, func)


def _repeat(func, args, kwargs):
    x = args[0]
    if type(x) is not _NT:
        return NotImplemented
    reps = _shape_args(args[1:], kwargs, key="repeats" if func is torch.Tensor.repeat else "dims")
    k, p = len(x._names), x.ndim
    if func in (torch.tile, torch.Tensor.tile) and len(reps) < p:
        reps = (1,) * (p - len(reps)) + tuple(reps)
    if len(reps) < p:
        raise ShapeError(f"{op_name(func)}: {len(reps)} repeats for a value with {p} "
                         f"positional dims")
    data = x._data
    if len(reps) > p:
        data = data.reshape(_named_sizes(x) + (1,) * (len(reps) - p) + tuple(x.shape))
    return result(data.repeat((1,) * k + tuple(reps)), x._names, func)


def _matrices(func, args, kwargs):
    """Ops on the last 2 positional dims that batch over any leading dims."""
    if not first_only(args, kwargs) or args[0].ndim < 2:
        return NotImplemented
    if func is torch.linalg.matrix_norm:
        args, kwargs = _matrix_norm_dims(args[0].ndim, args, kwargs)
    return on_data(func, args, kwargs)


def _lu_unpack(func, args, kwargs):
    """torch.lu_unpack reads the pivots without checking their shape against LU's (past
    their end): one instance's shapes are checked here, then the vmap fallback runs it."""
    lu, piv = given(args, kwargs, 0, LU_data=None, LU_pivots=None)
    if not isinstance(lu, (_NT, torch.Tensor)) or not isinstance(piv, (_NT, torch.Tensor)):
        return NotImplemented
    shape, pshape = tuple(lu.shape), tuple(piv.shape)
    if len(shape) < 2 or pshape != shape[:-2] + (min(shape[-2:]),):
        instance_invalid(func, args, kwargs,
                         f"torch.lu_unpack: expected LU_pivots of shape "
                         f"{shape[:-2] + (min(shape[-2:]),) if len(shape) >= 2 else '(?)'} "
                         f"for LU_data of shape {shape}, got {pshape}")
    return NotImplemented


def _matrix_norm_dims(p: int, args, kwargs):
    """matrix_norm's ``dim`` as negative (positional) dims: a non-negative one would count
    the named dims of the physical tensor."""
    dim = given(args, kwargs, 2, dim=None)[0]
    if dim is None or all(isinstance(d, int) and d < 0 for d in dim):
        return args, kwargs
    if not all(isinstance(d, int) and -p <= d < p for d in dim):
        raise UseFallback(dim)   # torch's own error, per instance
    dim = tuple(d - p if d >= 0 else d for d in dim)
    if len(args) > 2:
        return args[:2] + (dim,) + tuple(args[3:]), kwargs
    return args, {**kwargs, "dim": dim}


def _diagonal(func, args, kwargs):
    x = args[0]
    if not first_only(args, kwargs):
        return NotImplemented
    offset, d1, d2 = given(args, kwargs, offset=0, dim1=0, dim2=1)
    d1, d2 = _data_dims(x, (d1, d2), op_name(func))
    return result(torch.diagonal(x._data, offset, d1, d2), x._names, func)


# -- concatenation ------------------------------------------------------------------

def _full_layout(values, op, pad: bool = False):
    """The tensors among ``values`` laid out as ``[U..., own positional]`` and expanded to
    the full named sizes (``pad``: positional ranks padded to the largest with leading
    size-1 dims); the other values as they are."""
    tensors = [t for t in values if isinstance(t, (_NT, _T))]
    operands = [(f"tensors[{i}]", t) for i, t in enumerate(tensors) if type(t) is _NT]
    U = union_names(operands, op=op)
    sizes = {}
    for _, t in operands:
        sizes.update(zip(t._names, t._data.shape))
    full = tuple(sizes[n] for n in U)
    P = max(t.ndim if type(t) is _NT else t.dim() for t in tensors) if pad else 0
    out = []
    for t in values:
        if type(t) is _NT:
            d = align(t._data, t._names, t.ndim, U, max(t.ndim, P))
        elif isinstance(t, _T):
            d = t.reshape((1,) * (len(U) + max(P - t.dim(), 0)) + tuple(t.shape))
        else:
            out.append(t)
            continue
        out.append(d.expand(full + tuple(d.shape[len(U):])))
    return U, out


def _cat(new_dim: bool):
    def rule(func, args, kwargs):
        tensors = args[0] if args else kwargs.get("tensors")
        if "out" in kwargs or not isinstance(tensors, (list, tuple)) or not tensors:
            return NotImplemented
        dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
        op = op_name(func)
        _int_dims((dim,), op)
        ranks = {t.ndim if type(t) is _NT else t.dim() for t in tensors}
        if len(ranks) != 1:
            shapes = [tuple(t.shape) for t in tensors]
            raise ShapeError(f"{op}: tensors must have the same number of positional dims, "
                             f"got positional shapes {shapes}")
        p = ranks.pop()
        if p == 0 and not new_dim:
            shapes = ", ".join(fmt_named_shape(t.named_shape) if type(t) is _NT else "{}"
                               for t in tensors)
            raise ShapeError(
                f"{op}: zero-dimensional tensor (at position 0) cannot be concatenated: "
                f"the operands have no positional dims (named shapes {shapes}); named axes "
                f"are not dims to concatenate along: torch.stack adds a positional dim, "
                f"nx.positional(x, name) makes a named axis one")
        U, phys = _full_layout(tensors, op)
        d = _norm_pos(dim, p + 1 if new_dim else p, op)
        return result(func(phys, len(U) + d), U, func)
    return rule


# -- indexing -----------------------------------------------------------------------

def _is_adv(e) -> bool:
    if e is None or e is Ellipsis or isinstance(e, (slice, int, float)):
        return False   # (before hasattr: dynamo can't trace hasattr on a slice)
    return isinstance(e, (_T, list)) or hasattr(e, "__array__")


def _phys_index(x, index):
    items = index if isinstance(index, tuple) else (index,)
    for e in items:
        if type(e) is _NT:
            return None
    adv = [i for i, e in enumerate(items) if _is_adv(e)]
    if len(adv) > 1 and adv != list(range(adv[0], adv[0] + len(adv))):
        return None  # numpy moves split advanced indices to the front: let vmap place them
    return (slice(None),) * len(x._names) + items


def _getitem(func, args, kwargs):
    x, index = args
    if type(x) is not _NT:
        return NotImplemented
    idx = _phys_index(x, index)
    if idx is None:
        return NotImplemented
    return result(x._data[idx], x._names, func)


def _setitem(func, args, kwargs):
    x, index, value = args
    if type(x) is not _NT:
        raise AxisTypeError("assigning a NamedTensor into a plain tensor would drop its named "
                            "axes; make the target named too (e.g. nx.named or xmap)")
    check_apart(func, x)
    idx = _phys_index(x, index)
    if idx is None:
        raise AxisTypeError(
            "index assignment with a named index tensor (or split advanced indices) is not "
            "supported; use torch.where or Tensor.scatter instead")
    if isinstance(value, (_T, _NT)):
        tp = x._data[idx].dim() - len(x._names)
        extra = tuple(value.shape)[:max(value.ndim - tp, 0)]
        if any(s != 1 for s in extra):   # (torch drops leading 1s; here others would
            raise ShapeError(             # meet the named dims)
                f"index assignment: value tensor of positional shape {tuple(value.shape)} "
                f"cannot be broadcast to the indexing result's positional shape "
                f"{tuple(x._data[idx].shape[len(x._names):])} (named shape {x.named_shape})")
        value = value[(0,) * len(extra)] if extra else value
    if type(value) is _NT:
        extra = [n for n in value._names if n not in x._names]
        if extra:
            raise AxisSizeError(
                f"index assignment: the value has named axis {extra[0]!r} (size "
                f"{value.named_shape[extra[0]]}) that the target (named shape "
                f"{x.named_shape}) lacks; this would broadcast that axis into it")
        union_names([("target", x), ("value", value)], op="index assignment")
        vp = value.ndim
        value = align(value._data, value._names, vp, x._names, max(tp, vp))
    x._data[idx] = value
    return None


_declare = functools.partial(register, kind="shape")


def install() -> None:
    T = torch.Tensor
    _declare([T.view, T.reshape, torch.reshape, T.view_as, T.reshape_as], _view)
    _declare([T.expand, T.expand_as, torch.broadcast_to, T.broadcast_to], _expand)
    _declare([T.permute, torch.permute], _permute)
    _declare([T.transpose, torch.transpose, T.swapaxes, torch.swapaxes, T.swapdims,
              torch.swapdims, T.transpose_], _transpose)
    _declare([T.t, torch.t], _t)
    _declare([T.flatten, torch.flatten], _flatten)
    _declare([T.squeeze, torch.squeeze, T.squeeze_], _squeeze)
    _declare([T.unsqueeze, torch.unsqueeze, T.unsqueeze_], _unsqueeze)
    _declare([T.movedim, torch.movedim, T.moveaxis, torch.moveaxis], _movedim)
    _declare([T.flip, torch.flip], _flip)
    _declare([T.repeat, T.tile, torch.tile], _repeat)
    _declare([T.diagonal, torch.diagonal], _diagonal)
    _declare([T.tril, torch.tril, T.triu, torch.triu, torch.linalg.det, torch.det, T.det,
              torch.linalg.inv, torch.inverse, T.inverse, torch.linalg.slogdet,
              torch.logdet, torch.linalg.matrix_exp, torch.matrix_exp, torch.linalg.cholesky,
              torch.linalg.eigh, torch.linalg.eigvalsh, torch.linalg.svd, torch.linalg.svdvals,
              torch.linalg.qr, torch.linalg.pinv, torch.linalg.matrix_norm,
              torch.linalg.matrix_power, T.tril_, T.triu_], _matrices)
    _declare([torch.cat, torch.concat, torch.concatenate], _cat(False))
    _declare([torch.stack], _cat(True))
    _declare([T.__getitem__], _getitem)
    _declare([T.__setitem__], _setitem)
    _declare([torch.lu_unpack], _lu_unpack)
