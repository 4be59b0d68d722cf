"""PyTorch's named-tensor vocabulary on NamedTensors: ``rename``, ``refine_names``,
``align_to`` / ``align_as``, ``flatten`` / ``unflatten`` by name, and indexing by name.

PyTorch's named tensors named *dims* of one tensor; here named axes are a separate,
order-free set beside the positional dims.  The verbs keep their PyTorch spelling and do
what fits that model (``docs/migrating.md`` has the table).  Axes bound by an enclosing
``xmap`` cannot be renamed, merged, split or indexed inside it: their layout belongs to
the xmap (and to ``axis_resources``); use collectives there.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(24.).reshape(2, 3, 4), 'batch seq ...')
>>> x[{'batch': 1, 'seq': slice(0, 2)}].named_shape
{'seq': 2}
>>> x.rename(seq='time').align_to('time', 'batch', ...).shape
torch.Size([3, 2, 4])
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch

from ._dispatch import dispatch
from ._env import bound_axes
from ._errors import AxisSizeError, AxisSpecError, AxisTypeError, fmt_named_shape
from ._engine import NeedsWholeAxes
from ._interop import array_ufunc
from ._layout import align_to as _align_to
from ._layout import call, check_whole, insert_named, named
from ._parsing import check_identifier, parse_mapping
from ._tensor import NamedTensor
from ._tape import taped

__all__ = ["rename", "refine_names", "align_to", "align_as", "flatten", "unflatten",
           "getitem", "setitem", "__getitem__", "__setitem__", "attach"]


def _axes(x: NamedTensor) -> str:
    return fmt_named_shape(x.named_shape)


def _not_bound(names, op: str) -> None:
    bound = bound_axes()
    for n in names:
        if n in bound:
            raise AxisSpecError(
                f"{op}: axis {n!r} is bound by an enclosing xmap; its layout belongs to the "
                f"xmap (and its axis_resources), so it cannot be renamed, merged, split or "
                f"indexed here: do it outside the xmap, or use a collective "
                f"(nx.lax.all_gather, psum, ...)")


def _from_list(names: tuple, rank: int, op: str) -> dict:
    """PyTorch's name list (``None`` skips a dim, one ``...`` anywhere stands for the
    dims not listed) as ``{position: name}`` over ``rank`` dims."""
    n_ell = sum(1 for n in names if n is Ellipsis)
    if n_ell > 1:
        raise AxisSpecError(f"{op}: '...' may appear once, got {names!r}")
    if n_ell == 0 and len(names) != rank:
        raise AxisSpecError(
            f"{op}{names!r}: {len(names)} entries for {rank} dim(s); list one per dim or "
            f"add '...' for the rest")
    if n_ell and len(names) - 1 > rank:
        raise AxisSpecError(f"{op}{names!r}: more entries than the {rank} dim(s)")
    k = names.index(Ellipsis) if n_ell else len(names)
    tail = names[k + 1:]   # (placed at the last dims)
    out = {i: n for i, n in enumerate(names[:k]) if n is not None}
    out.update((rank - len(tail) + i, n) for i, n in enumerate(tail) if n is not None)
    seen = set()
    for n in out.values():
        check_identifier(n, where=op)
        if n in seen:
            raise AxisSpecError(f"{op}: axis {n!r} listed twice")
        seen.add(n)
    return out


# -- rename / refine_names -----------------------------------------------------------------

@taped("linear")
def rename(x: NamedTensor, *args, **rename_map) -> NamedTensor:
    """Rename named axes: ``rename(old='new')`` or ``rename({old: new})``.

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(2, 3), 'a b').rename({'a': 'x'}).named_shape
    {'x': 2, 'b': 3}
    """
    op = "Tensor.rename"
    if args:
        if len(args) == 1 and isinstance(args[0], dict):
            rename_map = {**args[0], **rename_map}
        elif len(args) == 1 and args[0] is None:
            raise AxisTypeError(
                f"{op}(None): named axes cannot be dropped, only placed: use "
                f"x.align_to({', '.join(map(repr, x._names))}, ...) or nx.positional(x)")
        else:
            raise AxisTypeError(
                f"{op}{args!r}: positional names would name dims; here named axes are "
                f"renamed by keyword or dict (x.rename(old='new'), x.rename({{old: new}})) and "
                f"positional dims are named with x.refine_names(...)")
    for old, new in rename_map.items():
        x._named_dim(old, op)
        check_identifier(new, where=op)
    _not_bound(list(rename_map) + list(rename_map.values()), op)
    names = tuple(rename_map.get(n, n) for n in x._names)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise AxisSpecError(f"{op}: renaming {rename_map!r} gives two axes named {dup!r} "
                            f"(named_shape {_axes(x)})")
    return NamedTensor._wrap(x._data, names)


@taped("linear")
def refine_names(x: NamedTensor, *names) -> NamedTensor:
    """Turn positional dims into named axes: one entry per positional dim (``None`` keeps
    it positional), or ``...`` for the dims not listed.

    >>> import torch, named_axes as nx
    >>> nx.named(torch.zeros(2, 3), {}).refine_names(None, 'c').named_shape
    {'c': 3}
    """
    names = _ellipsis(names)
    mapping = _from_list(names, x.ndim, "Tensor.refine_names")
    return named(x, mapping) if mapping else x


def _ellipsis(names: tuple) -> tuple:
    """The names given as one list or as arguments, PyTorch's ``'...'`` read as ``...``."""
    if len(names) == 1 and isinstance(names[0], (list, tuple)):
        names = tuple(names[0])
    return tuple(Ellipsis if type(n) is str and n == "..." else n for n in names)


# -- align_to / align_as ---------------------------------------------------------------------

@taped("linear")
def align_to(x: NamedTensor, *names):
    """Place named axes as positional dims in the order given; ``...`` stands for the
    positional dims; names the value lacks become size-1 dims; named axes not listed
    stay named.  With every name placed the result is a ``torch.Tensor``.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.zeros(2, 3), 'b ...')
    >>> x.align_to(..., 'b', 'new').shape
    torch.Size([3, 2, 1])
    """
    op = "Tensor.align_to"
    names = _ellipsis(names)
    if Ellipsis not in names and x.ndim:
        raise AxisSpecError(
            f"{op}{names!r}: the value has {x.ndim} positional dim(s) (shape "
            f"{tuple(x.shape)}); add '...' where they go, e.g. "
            f"x.align_to({', '.join(repr(n) for n in names)}, ...)")
    if any(n is None for n in names):
        raise AxisSpecError(f"{op}: None is not an axis name; '...' stands for positional dims")
    placed = [n for n in names if n is not Ellipsis]
    mapping = _from_list(tuple(names), x.ndim + len(placed), op)
    try:
        check_whole(x, placed, op)
    except NeedsWholeAxes as e:   # (the DTensor engine's local path: on the whole)
        return e.engine.whole(align_to, (x, *names), {}, e.names, run=call)
    sizes = {n: 1 for n in placed if n not in x._names}
    return insert_named(x, parse_mapping(mapping), sizes=sizes, what=op)


@taped("linear")
def align_as(x: NamedTensor, other) -> torch.Tensor:
    """``x`` laid out to broadcast against ``nx.positional(other)``.

    >>> import torch, named_axes as nx
    >>> y = nx.named(torch.zeros(2, 5, 3), 'b ...')
    >>> nx.named(torch.ones(2, 3), 'b ...').align_as(y).shape
    torch.Size([2, 1, 3])
    """
    op = "Tensor.align_as"
    if not isinstance(other, (NamedTensor, torch.Tensor)):
        raise AxisTypeError(f"{op}: expected a NamedTensor or tensor, got {type(other).__name__}")
    onames, ondim = (other._names if isinstance(other, NamedTensor) else ()), other.dim()
    extra = [n for n in x._names if n not in onames]
    if extra:
        raise AxisSpecError(
            f"{op}: the value has named axis {extra[0]!r} (named_shape {_axes(x)}) that the "
            f"other lacks (named axes: {', '.join(map(repr, onames)) or 'none'})")
    if x.ndim > ondim:
        raise AxisSpecError(
            f"{op}: the value has {x.ndim} positional dims, the other only {ondim}")
    out = align_to(x, *onames, ...)
    k = len(onames)
    for _ in range(ondim - x.ndim):
        out = out.unsqueeze(k)
    return out


# -- flatten / unflatten by name ----------------------------------------------------------------

def _is_name(v: Any) -> bool:
    return not isinstance(v, (int, torch.Tensor)) and v is not None and v is not Ellipsis


@taped("linear")
def flatten(x: NamedTensor, *args, **kwargs):
    """Positional ``flatten(start_dim, end_dim)``, or ``flatten(dims, out_dim)`` merging
    named axes ``dims`` (row-major in the order listed) into named axis ``out_dim``.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.arange(6.).reshape(2, 3), 'c h')
    >>> nx.positional(x.flatten(['c', 'h'], 'f'), 'f')
    tensor([0., 1., 2., 3., 4., 5.])
    """
    dims = args[0] if args else kwargs.get("dims")
    out_dim = args[1] if len(args) > 1 else kwargs.get("out_dim")
    if not (isinstance(dims, (list, tuple)) and dims and all(_is_name(d) for d in dims)
            and _is_name(out_dim)):
        return dispatch(torch.Tensor.flatten, (x, *args), kwargs)
    op = "Tensor.flatten"
    dims = list(dims)
    if len(set(dims)) != len(dims):
        raise AxisSpecError(f"{op}: {dims!r} lists an axis twice")
    idx = [x._named_dim(d, op) for d in dims]
    check_identifier(out_dim, where=op)
    rest = [i for i, n in enumerate(x._names) if i not in idx]
    if out_dim in [x._names[i] for i in rest]:
        raise AxisSpecError(f"{op}: the value already has a named axis {out_dim!r}")
    _not_bound(dims + [out_dim], op)
    data = _moved_first(x, idx, rest).flatten(0, len(idx) - 1)
    return NamedTensor._wrap(data, (out_dim,) + tuple(x._names[i] for i in rest))


def _moved_first(x: NamedTensor, first: list, rest: list) -> torch.Tensor:
    """The physical tensor of ``x`` with named axes ``first``, then ``rest``, leading."""
    return x._data.permute(first + rest + list(range(len(x._names), x._data.dim())))


@taped("linear")
def unflatten(x: NamedTensor, *args, **kwargs):
    """Positional ``unflatten(dim, sizes)``, or ``unflatten(name, namedshape)`` splitting
    named axis ``name`` into named axes (``(('c', 2), ('h', 3))`` or ``{'c': 2, 'h': 3}``;
    one size may be -1).

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.arange(6.), 'f')
    >>> nx.positional(x.unflatten('f', {'c': 2, 'h': -1}), 'c h')
    tensor([[0., 1., 2.],
            [3., 4., 5.]])
    """
    op = "Tensor.unflatten"
    dim = args[0] if args else kwargs.get("dim")
    sizes = args[1] if len(args) > 1 else kwargs.get("sizes")
    pairs = None
    if _is_name(dim):
        if dim not in x._names:
            _not_bound([dim], op)
            x._named_dim(dim, op)   # raises: the value has no named axis `dim`
        if isinstance(sizes, dict):
            pairs = list(sizes.items())
        elif isinstance(sizes, (list, tuple)) and sizes and all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in sizes):
            pairs = [tuple(p) for p in sizes]
    if pairs is None:
        return dispatch(torch.Tensor.unflatten, (x, *args), kwargs)
    new = [n for n, _ in pairs]
    for n in new:
        check_identifier(n, where=op)
    i = x._names.index(dim)
    rest = [j for j in range(len(x._names)) if j != i]
    clash = [n for n in new if n in [x._names[j] for j in rest]] or \
        [n for n in new if new.count(n) > 1]
    if clash:
        raise AxisSpecError(f"{op}: axis {clash[0]!r} would be named twice "
                            f"(named_shape {_axes(x)}, new axes {new!r})")
    _not_bound([dim] + new, op)
    try:
        shape = [operator.index(s) for _, s in pairs]
    except TypeError:
        raise AxisTypeError(f"{op}: sizes are ints (-1: the rest), got {dict(pairs)!r}") from None
    n = x._data.shape[i]
    known = math.prod(s for s in shape if s != -1)
    if shape.count(-1) > 1 or any(s < -1 for s in shape) or (
            known != n if -1 not in shape else known == 0 or n % known):
        raise AxisSizeError(f"{op}: axis {dim!r} of size {n} cannot be split into "
                            f"{dict(pairs)!r}")
    # -1 resolved here: reshape cannot infer it when another axis is empty
    shape = [n // known if s == -1 else s for s in shape]
    data = _moved_first(x, [i], rest)
    data = data.reshape(tuple(shape) + tuple(data.shape[1:]))
    return NamedTensor._wrap(data, tuple(new) + tuple(x._names[j] for j in rest))


# -- indexing by name ------------------------------------------------------------------------

def _str_index(x: NamedTensor, index: str):
    what = (f"named axis {index!r} of the value" if index in x._names
            else f"named axes {_axes(x)}")
    return AxisTypeError(
        f"x[{index!r}]: a string is not an index; to select along the {what}, index with a "
        f"dict: x[{{{index!r}: 3}}] (removes the axis) or x[{{{index!r}: slice(0, 4)}}] "
        f"(keeps it); to make it positional: x.align_to({index!r}, ...)")


def _is_int(v: Any) -> bool:
    if isinstance(v, (bool, slice)) or v is None:   # (before hasattr: dynamo traces these)
        return False
    if isinstance(v, int):
        return True
    if isinstance(v, torch.Tensor):
        return v.dim() == 0 and not v.is_floating_point() and v.dtype != torch.bool
    if getattr(v, "ndim", None) == 0 and hasattr(v, "dtype"):   # a 0-d numpy array
        return getattr(v.dtype, "kind", None) in ("i", "u")
    return hasattr(v, "__index__") and not hasattr(v, "__len__")


_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)


def _split(x: NamedTensor, index: dict, op: str):
    """(basic physical index, [(dim, index tensor, name)], kept names, positional index
    or None): named indexing keeps the positional dims, so the last is ``x``'s."""
    if type(index) is str:
        raise _str_index(x, index)
    basic: list = [slice(None)] * len(x._names)
    gathers = []
    pos: dict = {}
    for key, sel in index.items():
        if type(key) is int:
            pos[key] = sel
            continue
        i = x._named_dim(key, op)
        if _is_int(sel):
            s = int(sel)
            n = x._data.shape[i]
            if not -n <= s < n:
                raise AxisSizeError(f"{op}: index {s} is out of range for axis {key!r} of "
                                    f"size {n}")
            basic[i] = s
        elif isinstance(sel, slice):
            if sel.step is not None and _is_int(sel.step) and int(sel.step) <= 0:
                # (a ValueError, as torch's own refusal)
                raise AxisSpecError(
                    f"{op}: axis {key!r} takes slices with a positive step, as torch's "
                    f"indexing, got step {sel.step}; to reverse it, make it positional "
                    f"(x.align_to({key!r}, ...)) and flip that dim")
            basic[i] = sel
        elif isinstance(sel, (list, tuple, torch.Tensor)) or hasattr(sel, "__array__"):
            t = torch.as_tensor(sel)
            if t.dim() == 1 and t.numel() == 0:   # [] selects nothing (as_tensor made it float)
                t = t.long()
            # (not a boolean mask: the axis size would depend on the values)
            if t.dim() != 1 or t.dtype not in _INDEX_DTYPES:
                raise AxisTypeError(f"{op}: axis {key!r} takes an int, a slice or a 1-D integer "
                                    f"index, got {sel!r}")
            gathers.append((i, t.to(device=x._data.device, dtype=torch.long), key))
        else:
            raise AxisTypeError(f"{op}: axis {key!r} takes an int, a slice or a 1-D integer "
                                f"index, got {type(sel).__name__}")
    _not_bound([k for k in index if type(k) is not int], op)
    kept = tuple(n for n, b in zip(x._names, basic) if not isinstance(b, int))
    return basic, gathers, kept, _positional_index(x, pos)


def _positional_index(x: NamedTensor, pos: dict):
    if not pos:
        return None
    p = x.ndim
    norm = {}
    for k, v in pos.items():
        if not -p <= k < p:
            raise AxisSpecError(f"x[{{{k}: ...}}]: positional dim {k} is out of range for "
                                f"shape {tuple(x.shape)}")
        if k % p in norm:
            raise AxisSpecError(f"x[{{...}}]: positional dim {k % p} is indexed twice "
                                f"(keys {sorted(pos)}; shape {tuple(x.shape)})")
        norm[k % p] = v
    return tuple(norm.get(d, slice(None)) for d in range(max(norm) + 1))


@taped("linear", along=True)
def getitem(x: NamedTensor, index):
    """``x[{'batch': 3}]`` (drops ``batch``), ``x[{'seq': slice(0, 4)}]``,
    ``x[{'batch': torch.tensor([0, 2])}]`` (keep both), ``x[{'batch': 0, 1: 2}]`` (int keys
    are positional dims).

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.arange(6.).reshape(2, 3), 'b ...')
    >>> nx.positional(x[{'b': 1}])
    tensor([3., 4., 5.])
    """
    basic, gathers, kept, pidx = _split(x, index, "NamedTensor[{...}]")
    data = x._data
    for i, t, key in gathers:
        try:   # (as torch's indexing: negative indices count from the end)
            data = data[(slice(None),) * i + (t,)]
        except IndexError as e:
            raise AxisSizeError(f"NamedTensor[{{...}}]: axis {key!r} of size "
                                f"{data.shape[i]}: {e}") from None
    if any(b != slice(None) for b in basic):
        data = data[tuple(basic)]
    out = NamedTensor._wrap(data, kept)
    if pidx is not None:
        out = out[pidx]
    # no named axis left: a plain tensor, as every op returns one (guide §1)
    return out._data if type(out) is NamedTensor and not out._names else out


@taped("linear", output_arg=0, along=True)
def setitem(x: NamedTensor, index, value) -> None:
    """``x[{'batch': 3}] = v``: assign through a view (ints and slices only).

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.zeros(2, 3), 'b ...')
    >>> x[{'b': 1}] = 1.0
    >>> nx.positional(x).sum().item()
    3.0
    """
    basic, gathers, kept, pidx = _split(x, index, "NamedTensor[{...}] = ...")
    if gathers:
        raise AxisTypeError("NamedTensor[{...}] = ...: assignment takes ints and slices per "
                            "named axis (index tensors: use index_copy_ on the positional "
                            "value)")
    view = NamedTensor._wrap(x._data[tuple(basic)], kept)
    view[... if pidx is None else pidx] = value


def __getitem__(self, index):
    """Positional indexing as torch's; a dict selects along named axes (:func:`getitem`)."""
    if type(index) is dict or type(index) is str:
        return getitem(self, index)
    return dispatch(torch.Tensor.__getitem__, (self, index), {})


def __setitem__(self, index, value) -> None:
    if type(index) is dict or type(index) is str:
        return setitem(self, index, value)
    dispatch(torch.Tensor.__setitem__, (self, index, value), {})


def _get_grad(self):
    g = self._data.grad
    return None if g is None else NamedTensor._wrap(g, self._names)


def _set_grad(self, value) -> None:
    self._data.grad = None if value is None else _align_to(
        value, self._names, self.ndim, what="NamedTensor.grad")


def attach() -> None:
    """Put on NamedTensor (at ``import named_axes``) the methods that ``_tensor`` cannot
    import: this vocabulary, numpy ufuncs and ``.grad`` (aligned by name on assignment)."""
    methods = {f.__name__: f for f in (
        rename, refine_names, align_to, align_as, flatten, unflatten, __getitem__, __setitem__)}
    methods["__array_ufunc__"] = array_ufunc
    for name, f in methods.items():
        f.__qualname__ = f"NamedTensor.{name}"   # as help() and tracebacks name it
        setattr(NamedTensor, name, f)
    NamedTensor.grad = property(_get_grad, _set_grad, doc="The gradient, named as the value.")
