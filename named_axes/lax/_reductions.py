"""The reducing collectives ``psum``, ``pmean``, ``pmax`` and ``pmin`` (docs/guide.md §3).

``axis_name`` may mix names and positional ints (JAX's ``psum(x, ('i', 0))``).  A value
that lacks a name is replicated along it (``psum(1, 'i')`` is the size of ``i``); an
engine binding one of the axes may compute the result itself; otherwise the named dims
are reduced by the registered ops of :mod:`._ops`.

>>> import torch, named_axes as nx
>>> x = nx.named(torch.arange(6.).reshape(2, 3), 'i ...')
>>> nx.lax.psum(x, ('i', 0))
tensor(15.)
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from . import _ops
from .._dispatch import result
from .._engine import engine_for
from .._env import _state as _env_state
from .._env import RECORDERS, REPLICATED, axis_size
from .._errors import AxisSizeError
from .._tensor import NamedTensor
from .._torch_private import tree_map
from ._opdefs import REDUCE_METHOD
from ._common import (_as_named, _axis_names, _check_bound_size, _engine_method, _no_groups,
                      _norm_dims, _shows_axes)

__all__ = ["psum", "pmean", "pmax", "pmin"]

_NT = NamedTensor


def _reduce_positional(x: Any, pos: tuple, axis_name: Any, op: str) -> Any:
    """``x`` reduced over its positional dims ``pos`` (the ints of ``axis_name``)."""
    v = _as_named(x, op)
    data, k, p = v._data, len(v._names), v.ndim
    dims = [k + d for d in _norm_dims(pos, p, f"{op}(x, {axis_name!r})", "axis",
                                      f" (shape {tuple(data.shape[k:])})")]
    if op in ("pmax", "pmin") and any(data.shape[d] == 0 for d in dims):
        raise AxisSizeError(f"{op}(x, {axis_name!r}): a positional axis of size 0 has no "
                            f"entry to take the {op[1:]}imum of (shape {tuple(data.shape[k:])})")
    if op == "pmean":
        data = _floating(data)
    data = getattr(data, REDUCE_METHOD[op])(dims)
    return NamedTensor._wrap(data, x._names) if type(x) is _NT else data


def _floating(x: Any) -> Any:
    """``x`` in a floating dtype (pmean of integers is a float mean, as in JAX)."""
    if type(x) is _NT:
        return NamedTensor._wrap(_floating(x._data), x._names)
    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() or x.is_complex() else x.to(torch.get_default_dtype())
    if isinstance(x, (bool, int)):
        return float(x)
    return x


def _reduce(x: Any, axis_name: Any, op: str) -> Any:
    """One leaf ``x`` reduced by ``op`` ('psum', 'pmean', 'pmax', 'pmin') over ``axis_name``."""
    if type(x) is _NT and type(axis_name) is str and not _env_state.engine:
        out = _reduce_one(x, axis_name, op)
        if out is not None:
            return out
    names, pos = _axis_names(axis_name, op, positional=True)
    if pos:
        x = _reduce_positional(x, pos, axis_name, op)
    if op == "pmean":
        x = _floating(x)
    if type(x) is _NT and names:
        return _reduce_named(x, names, op)
    factor = _replicated(names, op)   # (1 for no names: JAX's psum(x, ()) is x)
    if type(x) is not _NT and not isinstance(x, (torch.Tensor, bool, int, float, complex)):
        _as_named(x, op)   # (raises: not a value)
    if names and isinstance(x, torch.Tensor) and _ops._tracing():
        return _replicated_in_graph(x, list(names), op)
    return x * factor if op == "psum" and factor != 1 else x


def _size(names, op: str) -> int:
    """How many instances the named axes ``names`` hold (also checks that they are bound)."""
    factor = 1
    for n in names:   # (a loop: dynamo can't trace math.prod of a generator)
        factor *= axis_size(n, op=op)
    return factor


def _replicated(names, op: str) -> int:
    """:func:`_size` of axes a value is replicated along, noted for the derivatives open
    around (``_env.REPLICATED``)."""
    for rec in RECORDERS:
        rec.setdefault(REPLICATED, set()).update(names)
    return _size(names, op)


def _reduce_named(x: NamedTensor, names: tuple, op: str) -> Any:
    """:func:`_reduce` of a NamedTensor over ``names``: an engine's own implementation, or
    the named dims it carries reduced and those it lacks (replicated) counted."""
    if op in ("pmax", "pmin"):   # (before any engine: none has an empty extreme)
        for n in (n for n in names if x.named_shape.get(n) == 0):
            raise AxisSizeError(f"{op} over axis {n!r} of size 0: no instance to take "
                                f"the {op[1:]}imum of (named shape {x.named_shape})")
    method = _engine_method(op, names)
    if method is not None:
        return method(x, names)
    carried = [n for n in names if n in x._names]
    missing = [n for n in names if n not in carried]
    factor = _replicated(missing, op)
    for n in carried:
        _check_bound_size(x, n, op)
    data = x._data
    if carried:
        data = _ops.collective(op, data, [x._names.index(n) for n in carried])
    if missing and _ops._tracing():
        data = _replicated_in_graph(data, missing, op)
    elif op == "psum" and factor != 1:
        data = data * factor
    return result(data, tuple(n for n in x._names if n not in carried), _OPS[op])


def _replicated_in_graph(data: torch.Tensor, missing: list, op: str):
    """A collective over axes the value is replicated along, written into a traced graph
    as the named op on the broadcast value (``make_graph`` shows ``psum``, not ``mul``)."""
    sizes = tuple(axis_size(n, op=op) for n in missing)
    wide = data.reshape((1,) * len(sizes) + tuple(data.shape)).expand(sizes + tuple(data.shape))
    return _ops.collective(op, wide, list(range(len(sizes))))


def _reduce_one(x: NamedTensor, name: str, op: str) -> Any:
    """``_reduce`` over one name that ``x`` carries with its bound size (the common case,
    no engine in scope), else None (the general path checks and raises)."""
    names = x._names
    if name not in names:
        return None
    i = names.index(name)
    data = x._data
    bound = _env_state.bound.get(name)
    if bound is not None and bound != data.shape[i] or data.shape[i] == 0:
        return None
    if op == "pmean":
        data = _floating(data)
    data = _ops.collective(op, data, [i])
    return result(data, names[:i] + names[i + 1:], _OPS[op])


def _reduce_tree(x: Any, axis_name: Any, op: str, groups: Any) -> Any:
    """``_reduce`` on every leaf of ``x`` (``axis_index_groups``, ``groups``, refused); a
    single tensor or number skips the pytree machinery."""
    _no_groups(groups, op)
    if type(x) is _NT or isinstance(x, (torch.Tensor, int, float, complex)):
        return _reduce(x, axis_name, op)
    engine = engine_for(_axis_names(axis_name, op, positional=True)[0])
    # (an engine that replays, a SerialLoop, reduces all leaves in one pass)
    with engine.tree() if engine is not None else contextlib.nullcontext():
        return tree_map(lambda v: v if v is None else _reduce(v, axis_name, op), x)


def _reduction(op: str, doc: str):
    """The public reduction ``op`` (its docstring ``doc``) on a pytree."""
    def reduction(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
        return _reduce_tree(x, axis_name, op, axis_index_groups)
    reduction.__name__ = reduction.__qualname__ = op
    reduction.__doc__ = doc
    return _shows_axes()(reduction)


psum = _reduction("psum", """Sum ``x`` (a pytree) over the named axes ``axis_name``, which
    leave its named shape.

    A value that lacks a name is replicated along it, so ``psum(1, 'i')`` is the size of ``i``.

    Raises:
        UnboundAxisError: a name ``x`` lacks that no enclosing map binds.

    >>> import torch, named_axes as nx
    >>> nx.lax.psum(nx.named(torch.arange(4.), 'i ...'), 'i')
    tensor(6.)
    """)
pmean = _reduction("pmean", """Mean of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmean(nx.named(torch.arange(4.), 'i ...'), 'i')
    tensor(1.5000)
    """)
pmax = _reduction("pmax", """Maximum of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmax(nx.named(torch.tensor([1., 5., 2.]), 'i ...'), 'i')
    tensor(5.)
    """)
pmin = _reduction("pmin", """Minimum of ``x`` (a pytree) over the named axes ``axis_name``.

    >>> import torch, named_axes as nx
    >>> nx.lax.pmin(nx.named(torch.tensor([1., 5., 2.]), 'i ...'), 'i')
    tensor(1.)
    """)
_OPS = {"psum": psum, "pmean": pmean, "pmax": pmax, "pmin": pmin}
