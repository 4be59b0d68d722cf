"""``nx.lax`` collectives with the signatures of ``jax.lax`` (docs/guide.md §3).

View every named axis as a ``pmap``'d axis: index ``j`` of axis ``'i'`` is "device"
``j``, and a value that lacks ``'i'`` is replicated along it.  ``axis_name`` is one
name or a tuple of names (a tuple acts as one axis, its index linearized row-major).

Each collective first asks the engine of the frame that binds the axis
(``_env.current_frame(name).engine``, an :class:`named_axes._engine.Engine`): if
``engine.collective(op)`` gives an implementation, it computes the result
(``impl(x, axis_names, **options)``).  Otherwise the collective runs locally as a
registered op (:mod:`._ops`).

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x - nx.lax.pmean(x, 'i'), in_axes=['i', ...], out_axes=['i', ...])
>>> f(torch.tensor([1., 3.]))
tensor([-1.,  1.])
"""
from __future__ import annotations

import functools
import math
import numbers
import operator
from typing import Any, Callable, Hashable, Sequence

import torch
import torch.fx.traceback as fx_traceback

from .._torch_private import tree_map

from . import _ops
from .._dispatch import result
from .._engine import engine_for
from .._env import _state as _env_state
from .._env import axis_size, current_frame, bound_axes
from .._errors import (AxisSizeError, AxisSpecError, AxisTypeError, fmt_named_shape,
                       fmt_names)
from .._layout import align, expand_to
from .._tensor import NamedTensor


# While nx.make_graph traces (and only then), each collective's nodes carry the axis
# names it was called with (node.meta["custom"]["axis_name"]), so the printed graph
# shows `psum ... # over 'b'`, not only the physical dims.
LABEL_AXES = [False]


def _shows_axes(position: int = 1) -> Callable:
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not LABEL_AXES[0]:
                return fn(*args, **kwargs)
            name = args[position] if len(args) > position else kwargs.get("axis_name")
            # fx_traceback.annotate's effect, spelled so torch 2.9 (no annotate) has it too
            meta = fx_traceback.current_meta
            before = meta.get("custom")
            meta["custom"] = {**(before or {}), "axis_name": name, "collective": fn.__name__}
            try:
                return fn(*args, **kwargs)
            finally:
                if before is None:
                    meta.pop("custom", None)
                else:
                    meta["custom"] = before
        return call
    return decorate

__all__ = ["psum", "pmean", "pmax", "pmin", "pshuffle", "ppermute", "all_gather",
           "all_to_all", "psum_scatter", "axis_index"]

_NT = NamedTensor


# -- helpers -------------------------------------------------------------------------

def _axis_names(axis_name: Any, op: str) -> tuple:
    """``axis_name`` as a tuple of names (``()`` for an empty tuple: the collective over
    no axis, a group of one, as in JAX).  Positional ints are refused here: only the
    reductions take them (:func:`_split_axes`)."""
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    for n in names:
        if _is_positional(n):
            raise AxisSpecError(
                f"{op}: axis_name {axis_name!r} contains the positional axis {n!r}; only "
                f"psum, pmean, pmax and pmin take positional axes (as in JAX)")
    if len(set(names)) != len(names):
        raise AxisSpecError(f"{op}: axis_name {axis_name!r} repeats a name")
    return names


def _is_positional(n: Any) -> bool:
    return isinstance(n, numbers.Integral) and not isinstance(n, bool)


def _split_axes(axis_name: Any, op: str) -> tuple:
    """``(names, positional ints)`` of a reduction's ``axis_name`` (JAX's ``psum(x, ('i',
    0))`` sums named ``i`` and positional dim 0)."""
    items = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    names = tuple(n for n in items if not _is_positional(n))
    pos = tuple(int(n) for n in items if _is_positional(n))
    if len(set(names)) != len(names):
        raise AxisSpecError(f"{op}: axis_name {axis_name!r} repeats a name")
    return names, pos


_POS_REDUCE = {"psum": torch.sum, "pmean": torch.mean, "pmax": torch.amax, "pmin": torch.amin}


def _reduce_positional(x: Any, pos: tuple, axis_name: Any, op: str, kind: str) -> Any:
    """``x`` reduced over its positional dims ``pos`` (the ints of ``axis_name``)."""
    if type(x) is _NT:
        data, k, p = x._data, len(x._names), x.ndim
    elif isinstance(x, torch.Tensor):
        data, k, p = x, 0, x.dim()
    elif isinstance(x, (bool, int, float, complex)):
        data, k, p = torch.as_tensor(x), 0, 0
    else:
        raise AxisTypeError(f"{op}: expected a tensor, NamedTensor or number, got "
                            f"{type(x).__name__}")
    dims = []
    for d in pos:
        if not -p <= d < p:
            raise AxisSpecError(f"{op}(x, {axis_name!r}): positional axis {d} is out of range "
                                f"for a value with {p} positional dims (shape "
                                f"{tuple(data.shape[k:])})")
        dims.append(k + d % p)
    if len(set(dims)) != len(dims):
        raise AxisSpecError(f"{op}(x, {axis_name!r}): names one positional axis twice")
    if kind == "pmean":
        data = _floating(data)
    data = _POS_REDUCE[kind](data, dims)
    return NamedTensor._wrap(data, x._names) if type(x) is _NT else data


def _floating(x: Any) -> Any:
    """``x`` in a floating dtype (pmean of integers is a float mean, as in JAX)."""
    if type(x) is _NT:
        d = x._data
        return x if d.is_floating_point() or d.is_complex() else \
            NamedTensor._wrap(d.to(torch.get_default_dtype()), x._names)
    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() or x.is_complex() else x.to(torch.get_default_dtype())
    if isinstance(x, (bool, int)):
        return float(x)
    return x


def _no_groups(groups: Any, op: str) -> None:
    if groups is not None:
        raise AxisSpecError(f"{op}: axis_index_groups={groups!r} is not supported; "
                            f"split the axis into two named axes instead")


def _engine_method(op: str, names: tuple):
    """The engine's own implementation of the collective ``op`` for these axes (the first
    frame binding one of them whose engine has one), or None."""
    if not _env_state.engine:   # no frame in scope has an engine (plain xmap)
        return None
    for n in names:
        frame = current_frame(n)
        if frame is not None and frame.engine is not None:
            method = frame.engine.collective(op)
            if method is not None:
                return method
    return None


def _as_named(x: Any, op: str, what: str = "the argument") -> NamedTensor:
    """``x`` as a NamedTensor (a plain tensor or number: one with no names)."""
    if type(x) is _NT:
        return x
    if isinstance(x, torch.Tensor):
        return NamedTensor._wrap(x, ())
    if isinstance(x, (bool, int, float, complex)):
        return NamedTensor._wrap(torch.as_tensor(x), ())
    raise AxisTypeError(f"{op}: {what} must be a tensor, NamedTensor or number, got "
                        f"{type(x).__name__}")


def _out(data: torch.Tensor, names: tuple, op) -> Any:
    """A NamedTensor, or a plain tensor when no named axis is left."""
    if not names:
        return data
    if type(data) is torch.Tensor and not _env_state.conflicts:
        return NamedTensor._wrap(data, names)
    return result(data, names, op)


def _merged(x: NamedTensor, names: tuple, op: str):
    """``x`` carrying every name (replicated where it lacked one), laid out as
    ``[names merged into one dim, other names..., positional...]``."""
    for n in names:
        if n not in x._names:
            x = expand_to(x, n, op=op)
        else:
            _check_bound_size(x, n, op)
    rest = tuple(n for n in x._names if n not in names)
    p = x.ndim
    data = align(x._data, x._names, p, names + rest, p)
    sizes = tuple(data.shape[:len(names)])
    if len(names) != 1:
        data = data.reshape((math.prod(sizes),) + tuple(data.shape[len(names):]))
    return data, sizes, rest, p


def _unmerged(data: torch.Tensor, names: tuple, sizes: tuple, rest: tuple, op) -> Any:
    if len(names) != 1:
        data = data.reshape(sizes + tuple(data.shape[1:]))
    return result(data, names + rest, op)


def _check_bound_size(x: NamedTensor, name: Hashable, op: str) -> None:
    bound = bound_axes()
    if name in bound and bound[name] != x.named_shape[name]:
        raise AxisSizeError(f"{op}: axis {name!r} has size {x.named_shape[name]} in the value "
                            f"but {bound[name]} where it is bound")


def _norm(d: int, n: int, op: str, arg: str) -> int:
    if not isinstance(d, int) or not -n <= d < n:
        raise AxisSpecError(f"{op}: {arg}={d!r} is out of range for {n} positional dims")
    return d + n if d < 0 else d


# -- reductions ----------------------------------------------------------------------

def _reduce(x: Any, axis_name: Any, op: str, kind: str) -> Any:
    if type(x) is _NT and type(axis_name) is str and not _env_state.engine:
        out = _reduce_one(x, axis_name, kind)
        if out is not None:
            return out
    names, pos = _split_axes(axis_name, op)
    if pos:
        x = _reduce_positional(x, pos, axis_name, op, kind)
    if kind == "pmean":
        x = _floating(x)
    if not names:   # no named axis (JAX's psum(x, ()) is x)
        if type(x) is _NT or isinstance(x, (torch.Tensor, bool, int, float, complex)):
            return x
        raise AxisTypeError(f"{op}: expected a tensor, NamedTensor or number, got "
                            f"{type(x).__name__}")
    if type(x) is _NT:
        method = _engine_method(kind, names)
        if method is not None:
            return method(x, names)
    carried = [n for n in names if type(x) is _NT and n in x._names]
    missing = [n for n in names if n not in carried]
    factor = 1
    for n in missing:
        factor *= axis_size(n, op=op)   # also checks that the name is bound
    if type(x) is not _NT:
        if isinstance(x, torch.Tensor) and missing and _ops._tracing():
            return _replicated_in_graph(x, missing, kind, op)
        if isinstance(x, torch.Tensor) or isinstance(x, (bool, int, float, complex)):
            return x * factor if kind == "psum" and factor != 1 else x
        raise AxisTypeError(f"{op}: expected a tensor, NamedTensor or number, got "
                            f"{type(x).__name__}")
    for n in carried:
        _check_bound_size(x, n, op)
    data = x._data
    if carried:
        dims = [x._names.index(n) for n in carried]
        engine = engine_for(carried)
        out = engine.reduce(kind, data, dims) if engine is not None else None
        data = getattr(_ops, kind)(data, dims) if out is None else out
        data = settled(data, tuple(carried))
    if missing and _ops._tracing():
        data = _replicated_in_graph(data, missing, kind, op)
    elif kind == "psum" and factor != 1:
        data = data * factor
    return _out(data, tuple(n for n in x._names if n not in carried), _OPS[kind])


def settled(data: Any, names: tuple) -> Any:
    """A sum over ``names`` (``psum``, ``pdot``) handed to the engine that runs them
    (the DTensor engine all-reduces a ``Partial`` there)."""
    engine = engine_for(names)
    return engine.settle(data) if engine is not None else data


def _replicated_in_graph(data: torch.Tensor, missing: list, kind: str, op: str):
    """A collective over axes the value is replicated along, written into a traced graph
    as the named op on the broadcast value (``make_graph`` shows ``psum``, not ``mul``)."""
    sizes = tuple(axis_size(n, op=op) for n in missing)
    wide = data.reshape((1,) * len(sizes) + tuple(data.shape)).expand(sizes + tuple(data.shape))
    return getattr(_ops, kind)(wide, list(range(len(sizes))))


def _reduce_one(x: NamedTensor, name: str, kind: str) -> Any:
    """``_reduce`` over one name that ``x`` carries with its bound size (the common case,
    no engine in scope), else None (the general path checks and raises)."""
    names = x._names
    if name not in names:
        return None
    i = names.index(name)
    data = x._data
    bound = _env_state.bound.get(name)
    if bound is not None and bound != data.shape[i]:
        return None
    if kind == "pmean" and not (data.is_floating_point() or data.is_complex()):
        data = data.to(torch.get_default_dtype())   # a float mean, as in JAX
    data = _KINDS[kind](data, [i])
    left = names[:i] + names[i + 1:]
    return _out(data, left, _OPS[kind])


def _reduce_tree(x: Any, axis_name: Any, op: str) -> Any:
    """``_reduce`` on every leaf of ``x``; a single tensor or number skips the pytree
    machinery."""
    if type(x) is _NT or isinstance(x, (torch.Tensor, int, float, complex)):
        return _reduce(x, axis_name, op, op)
    engine = engine_for(_split_axes(axis_name, op)[0])
    if engine is None:
        return tree_map(lambda v: _reduce(v, axis_name, op, op), x)
    with engine.tree():   # an engine that replays (SerialLoop) reduces all leaves in one pass
        return tree_map(lambda v: _reduce(v, axis_name, op, op), x)


@_shows_axes()
def psum(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Sum ``x`` (a pytree) over the named axes ``axis_name``, which leave its named shape.

    A value that lacks a name is replicated along it, so ``psum(1, 'i')`` is the size of ``i``.

    Raises:
        UnboundAxisError: a name ``x`` lacks that no enclosing map binds.

    >>> import torch, named_axes as nx
    >>> nx.lax.psum(nx.named(torch.arange(4.), 'i ...'), 'i')
    tensor(6.)
    """
    _no_groups(axis_index_groups, "psum")
    return _reduce_tree(x, axis_name, "psum")


@_shows_axes()
def pmean(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Mean of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmean(nx.named(torch.arange(4.), 'i ...'), 'i')
    tensor(1.5000)
    """
    _no_groups(axis_index_groups, "pmean")
    return _reduce_tree(x, axis_name, "pmean")


@_shows_axes()
def pmax(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Maximum of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmax(nx.named(torch.tensor([1., 5., 2.]), 'i ...'), 'i')
    tensor(5.)
    """
    _no_groups(axis_index_groups, "pmax")
    return _reduce_tree(x, axis_name, "pmax")


@_shows_axes()
def pmin(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Minimum of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmin(nx.named(torch.tensor([1., 5., 2.]), 'i ...'), 'i')
    tensor(1.)
    """
    _no_groups(axis_index_groups, "pmin")
    return _reduce_tree(x, axis_name, "pmin")


# -- data movement ----------------------------------------------------------------------

@_shows_axes()
def all_gather(x: Any, axis_name: Any, *, axis_index_groups: Any = None, axis: int = 0,
               tiled: bool = False) -> Any:
    """Gather ``x`` from every index of ``axis_name`` into a new positional axis ``axis``.

    The result no longer carries ``axis_name`` (every "device" holds the whole).
    ``tiled=True`` concatenates along the existing positional axis ``axis`` instead.

    >>> import torch, named_axes as nx
    >>> nx.lax.all_gather(nx.named(torch.arange(3.), 'i ...'), 'i')
    tensor([0., 1., 2.])
    """
    op = "all_gather"
    _no_groups(axis_index_groups, op)
    names = _axis_names(axis_name, op)
    x = _as_named(x, op)
    method = _engine_method(op, names)
    if method is not None:
        return method(x, names, axis=axis, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    if tiled and p == 0:
        raise AxisSpecError(f"all_gather(tiled=True): the value has no positional axis to "
                            f"concatenate along (named_shape {fmt_named_shape(x.named_shape)})")
    a = _norm(axis, p if tiled else p + 1, op, "axis")
    return _out(_ops.all_gather(data, 0, len(rest) + a, bool(tiled)), rest, all_gather)


@_shows_axes()
def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0,
                 axis_index_groups: Any = None, tiled: bool = False) -> Any:
    """``psum`` over ``axis_name``, then split positional axis ``scatter_dimension``
    among its indices: the result carries ``axis_name`` again.

    Without ``tiled`` that axis must have the size of ``axis_name`` and disappears;
    with ``tiled`` it must be a multiple of it and shrinks.

    >>> import torch, named_axes as nx
    >>> y = nx.lax.psum_scatter(nx.named(torch.ones(2, 2), 'i ...'), 'i')
    >>> y.named_shape, nx.positional(y, 'i')
    ({'i': 2}, tensor([2., 2.]))
    """
    op = "psum_scatter"
    _no_groups(axis_index_groups, op)
    names = _axis_names(axis_name, op)
    x = _as_named(x, op)
    method = _engine_method(op, names)
    if method is not None:
        return method(x, names, scatter_dimension=scatter_dimension, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    d = _norm(scatter_dimension, p, op, "scatter_dimension")
    n, s = math.prod(sizes), x.shape[d]
    if (s != n) if not tiled else (s % n):
        need = f"a multiple of {n}" if tiled else f"{n}"
        raise AxisSizeError(f"psum_scatter(x, {axis_name!r}, scatter_dimension={scatter_dimension}"
                            f"{', tiled=True' if tiled else ''}): positional dim {d} has size "
                            f"{s}, but must be {need} (the size of {fmt_names(names)})")
    out = _ops.psum_scatter(data, 0, 1 + len(rest) + d, bool(tiled))
    return _unmerged(out, names, sizes, rest, psum_scatter)


@_shows_axes()
def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *,
               axis_index_groups: Any = None, tiled: bool = False) -> Any:
    """Split positional axis ``split_axis`` among the indices of ``axis_name`` and stack
    (``tiled``: concatenate) what each index receives along ``concat_axis``.

    ``out[i=d]`` along ``concat_axis`` holds, in order of ``j``, block ``d`` of
    ``x[i=j]`` along ``split_axis``.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.arange(4.).reshape(2, 2), 'i ...')
    >>> nx.positional(nx.lax.all_to_all(x, 'i', 0, 0), 'i')
    tensor([[0., 2.],
            [1., 3.]])
    """
    op = "all_to_all"
    _no_groups(axis_index_groups, op)
    names = _axis_names(axis_name, op)
    x = _as_named(x, op)
    method = _engine_method(op, names)
    if method is not None:
        return method(x, names, split_axis=split_axis, concat_axis=concat_axis, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    s = _norm(split_axis, p, op, "split_axis")
    c = _norm(concat_axis, p, op, "concat_axis")
    n, size = math.prod(sizes), x.shape[s]
    if (size != n) if not tiled else (size % n):
        need = f"a multiple of {n}" if tiled else f"{n}"
        raise AxisSizeError(f"all_to_all(x, {axis_name!r}, split_axis={split_axis}, "
                            f"concat_axis={concat_axis}): positional dim {s} has size {size}, "
                            f"but must be {need} (the size of {fmt_names(names)})")
    k = 1 + len(rest)
    out = _ops.all_to_all(data, 0, k + s, k + c, bool(tiled))
    return _unmerged(out, names, sizes, rest, all_to_all)


@_shows_axes()
def ppermute(x: Any, axis_name: Any, perm: Sequence) -> Any:
    """Send ``x`` at index ``src`` of ``axis_name`` to index ``dst`` for each ``(src, dst)``
    in ``perm``; indices that receive nothing get zeros.  The result keeps ``axis_name``.

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.tensor([1., 2., 3.]), 'i ...')
    >>> nx.positional(nx.lax.ppermute(x, 'i', [(0, 1), (1, 2)]), 'i')
    tensor([0., 1., 2.])
    """
    op = "ppermute"
    names = _axis_names(axis_name, op)
    x = _as_named(x, op)
    pairs = _perm_pairs(perm, axis_name)
    method = _engine_method(op, names)
    if method is not None:
        return method(x, names, perm=pairs)
    data, sizes, rest, p = _merged(x, names, op)
    n = math.prod(sizes)
    for pair in pairs:
        if not all(0 <= i < n for i in pair):
            raise AxisSpecError(f"ppermute(x, {axis_name!r}, perm={perm!r}): {pair!r} is not a "
                                f"(source, destination) pair of indices in [0, {n})")
    src, dst = [a for a, _ in pairs], [b for _, b in pairs]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise AxisSpecError(f"ppermute(x, {axis_name!r}, perm={perm!r}): every index may "
                            f"send at most once and receive at most once")
    out = _ops.ppermute(data, 0, src, dst)
    return _unmerged(out, names, sizes, rest, ppermute)


def _index(i: Any) -> int:
    """An index given as a Python or numpy integer (or a 0-d integer tensor)."""
    if isinstance(i, bool):
        raise TypeError(i)
    return operator.index(i)


def _perm_pairs(perm: Any, axis_name: Any) -> list:
    """``perm`` as a list of ``(src, dst)`` int pairs (numpy integers and arrays accepted)."""
    try:
        pairs = [tuple(_index(i) for i in pair) for pair in perm]
    except TypeError:
        pairs = None
    if pairs is None or any(len(pair) != 2 for pair in pairs):
        raise AxisSpecError(f"ppermute(x, {axis_name!r}, perm={perm!r}): perm must be a "
                            f"sequence of (source, destination) pairs of integer indices")
    return pairs


@_shows_axes()
def pshuffle(x: Any, axis_name: Any, perm: Sequence[int]) -> Any:
    """Index ``j`` of ``axis_name`` receives ``x`` from index ``perm[j]`` (a permutation).

    >>> import torch, named_axes as nx
    >>> x = nx.named(torch.tensor([1., 2., 3.]), 'i ...')
    >>> nx.positional(nx.lax.pshuffle(x, 'i', [2, 1, 0]), 'i')
    tensor([3., 2., 1.])
    """
    op = "pshuffle"
    names = _axis_names(axis_name, op)
    method = _engine_method(op, names)   # (a SerialLoop refuses: it never holds every index)
    if method is not None:
        return method(_as_named(x, op), names, perm=perm)
    # the size where the axis is bound (a value's own size may be a chunk of it)
    bound = bound_axes()
    n = 1
    for a in names:   # (a loop: dynamo can't trace math.prod of a generator)
        n *= (bound[a] if a in bound else x.named_shape[a] if type(x) is _NT and a in x._names
              else axis_size(a, op=op))
    try:
        perm = [_index(i) for i in perm]
    except TypeError:
        raise AxisSpecError(f"pshuffle(x, {axis_name!r}, perm={perm!r}): perm must be a "
                            f"sequence of integer indices") from None
    if sorted(perm) != list(range(n)):
        raise AxisSpecError(f"pshuffle(x, {axis_name!r}, perm={perm!r}): perm must be a "
                            f"permutation of range({n}) (the size of {fmt_names(names)})")
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


@_shows_axes(0)
def axis_index(axis_name: Any) -> NamedTensor:
    """The index along ``axis_name``: a value with named shape ``{axis_name: size}``.

    For a tuple of names the index is linearized row-major.

    >>> import torch, named_axes as nx
    >>> nx.xmap(lambda x: x * nx.lax.axis_index('i'), in_axes=['i', ...],
    ...         out_axes=['i', ...])(torch.ones(3))
    tensor([0., 1., 2.])
    """
    names = _axis_names(axis_name, "axis_index")
    method = _engine_method("axis_index", names)
    if method is not None:
        return method(names)
    sizes = tuple(axis_size(n, op="axis_index") for n in names)
    data = _ops.axis_index(math.prod(sizes), _default_device())
    if len(names) != 1:
        data = data.reshape(sizes)   # (no names: the index 0 in a group of one, as in JAX)
    return result(data, names, axis_index) if names else data


def _default_device() -> torch.device:
    """The device factory functions use (``torch.get_default_device()``).  Under dynamo,
    which can't trace that function (it returns a non-tensor), the device of a new
    tensor, a constant while tracing (dynamo guards on the default device)."""
    if torch.compiler.is_compiling():
        return torch.empty(0).device
    return torch.get_default_device()


_OPS = {"psum": psum, "pmean": pmean, "pmax": pmax, "pmin": pmin}
_KINDS = {"psum": _ops.psum, "pmean": _ops.pmean, "pmax": _ops.pmax, "pmin": _ops.pmin}
