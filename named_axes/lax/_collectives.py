"""The ``nx.lax`` collectives that move data between the indices of an axis
(``all_gather``, ``psum_scatter``, ``all_to_all``, ``ppermute``, ``pshuffle``) and
``axis_index`` (docs/guide.md §3).

Index ``j`` of axis ``'i'`` is "device" ``j``.  ``axis_name`` is one name or a tuple of
names (one axis, its index linearized row-major); ``x`` may be a pytree, as in JAX.  The
engine binding the axis is asked first (``impl(x, axis_names, **options)``).

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x - nx.lax.pmean(x, 'i'), in_axes=['i', ...], out_axes=['i', ...])
>>> f(torch.tensor([1., 3.]))
tensor([-1.,  1.])
"""
from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable, Sequence

import torch

from . import _ops
from .._dispatch import result
from .._env import axis_size, bound_axes
from .._errors import AxisSizeError, AxisSpecError, fmt_named_shape, fmt_names
from .._layout import align, expand_to
from .._tensor import NamedTensor
from .._torch_private import tree_map
from ._common import (_as_named, _axis_names, _check_bound_size, _engine_method, _no_groups,
                      _norm, _shows_axes)

__all__ = ["pshuffle", "ppermute", "all_gather", "all_to_all", "psum_scatter", "axis_index"]

_NT = NamedTensor


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


def _over_trees(fn: Callable) -> Callable:
    """``fn`` on every leaf of ``x``, a pytree (as JAX's collectives take one; None
    leaves stay None); a single value skips the pytree machinery."""
    @functools.wraps(fn)
    def call(x, *args, **kwargs):
        if type(x) is _NT or isinstance(x, torch.Tensor):
            return fn(x, *args, **kwargs)
        return tree_map(lambda v: v if v is None else fn(v, *args, **kwargs), x)
    return call


def _begin(op: str, x: Any, axis_name: Any, groups: Any = None) -> tuple:
    """A collective's start: ``(x as a NamedTensor, the axis names, the engine's own
    implementation or None)`` -- ``axis_index_groups`` refused, as everywhere here."""
    _no_groups(groups, op)
    names = _axis_names(axis_name, op)
    return _as_named(x, op), names, _engine_method(op, names)


@_over_trees
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
    x, names, method = _begin(op, x, axis_name, axis_index_groups)
    if method is not None:
        return method(x, names, axis=axis, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    if tiled and p == 0:
        raise AxisSpecError(f"all_gather(tiled=True): the value has no positional axis to "
                            f"concatenate along (named_shape {fmt_named_shape(x.named_shape)})")
    a = _norm(axis, p if tiled else p + 1, op, "axis")
    out = _ops.collective("all_gather", data, 0, len(rest) + a, bool(tiled))
    return result(out, rest, all_gather)


def _check_split(call: str, size: int, dim: int, sizes: list, names: tuple,
                 tiled: bool) -> None:
    """Refuse a positional dim that the indices of ``names`` cannot split: its size must
    be their count (``tiled``: a multiple of it)."""
    n = math.prod(sizes)
    if (size != n) if not tiled else (size % n):
        need = f"a multiple of {n}" if tiled else f"{n}"
        raise AxisSizeError(f"{call}: positional dim {dim} has size {size}, but must be "
                            f"{need} (the size of {fmt_names(names)})")


@_over_trees
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
    x, names, method = _begin(op, x, axis_name, axis_index_groups)
    if method is not None:
        return method(x, names, scatter_dimension=scatter_dimension, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    d = _norm(scatter_dimension, p, op, "scatter_dimension")
    _check_split(f"psum_scatter(x, {axis_name!r}, scatter_dimension={scatter_dimension}"
                 f"{', tiled=True' if tiled else ''})", x.shape[d], d, sizes, names, tiled)
    out = _ops.collective("psum_scatter", data, 0, 1 + len(rest) + d, bool(tiled))
    return _unmerged(out, names, sizes, rest, psum_scatter)


@_over_trees
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
    x, names, method = _begin(op, x, axis_name, axis_index_groups)
    if method is not None:
        return method(x, names, split_axis=split_axis, concat_axis=concat_axis, tiled=tiled)
    data, sizes, rest, p = _merged(x, names, op)
    s = _norm(split_axis, p, op, "split_axis")
    c = _norm(concat_axis, p, op, "concat_axis")
    _check_split(f"all_to_all(x, {axis_name!r}, split_axis={split_axis}, "
                 f"concat_axis={concat_axis})", x.shape[s], s, sizes, names, tiled)
    k = 1 + len(rest)
    out = _ops.collective("all_to_all", data, 0, k + s, k + c, bool(tiled))
    return _unmerged(out, names, sizes, rest, all_to_all)


@_over_trees
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
    x, names, method = _begin(op, x, axis_name)
    pairs = _perm_pairs(perm, axis_name)
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
    out = _ops.collective("ppermute", data, 0, src, dst)
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


@_over_trees
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
    data = _ops.collective("axis_index", math.prod(sizes), _default_device())
    if len(names) != 1:
        data = data.reshape(sizes)   # (no names: the index 0 in a group of one, as in JAX)
    return result(data, names, axis_index) if names else data


def _default_device() -> torch.device:
    """``torch.get_default_device()``; under dynamo, which can't trace it, a new tensor's
    device (a constant there: dynamo guards on the default device)."""
    if torch.compiler.is_dynamo_compiling():
        return torch.empty(0).device
    return torch.get_default_device()
