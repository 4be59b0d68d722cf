"""What every ``nx.lax`` collective shares: reading ``axis_name``, finding the engine's
own implementation, taking arguments as NamedTensors, and labelling traced nodes with
the axes a collective was called with.

>>> from named_axes.lax._common import _axis_names
>>> _axis_names(('i', 'j'), 'psum'), _axis_names('i', 'psum')
(('i', 'j'), ('i',))
"""
from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch
import torch.fx.traceback as fx_traceback

from .._env import _state as _env_state
from .._env import bound_axes, current_frame
from .._errors import AxisSizeError, AxisSpecError, AxisTypeError
from .._layout import from_numpy
from .._tensor import NamedTensor
from .._tape import TAPES, kind_of, note_result

_NT = NamedTensor


# While nx.make_graph traces (and only then), each collective's nodes carry the axis
# names it was called with (node.meta["custom"]["axis_name"]), so the printed graph
# shows `psum ... # over 'b'`, not only the physical dims.
LABEL_AXES = [False]


def _shows_axes(position: int = 1) -> Callable:
    """Decorate a collective: open tapes note it (:mod:`named_axes._tape`), and while
    ``nx.make_graph`` traces, its nodes carry the axes it was called with."""
    def decorate(fn: Callable) -> Callable:
        kind = kind_of(fn.__name__)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            axes = args[position] if len(args) > position else kwargs.get("axis_name")
            out = fn(*args, **kwargs) if not LABEL_AXES[0] else _labelled(
                fn, axes, args, kwargs)
            if TAPES:   # inside nx.grad / nx.vjp (eager or traced by dynamo)
                note_result(kind, args, kwargs, out, collective=(fn.__name__, axes))
            return out
        return call
    return decorate


def _labelled(fn: Callable, name: Any, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``, the nodes it traces labelled with the axis ``name``."""
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


def _axis_names(axis_name: Any, op: str, positional: bool = False) -> tuple:
    """``axis_name`` as a tuple of names (``()`` for an empty tuple: the collective over
    no axis, a group of one, as in JAX).  Only the reductions take positional ints
    (JAX's ``psum(x, ('i', 0))``): with ``positional``, ``(names, positional ints)``."""
    items = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    names = tuple(n for n in items if not _is_positional(n))
    pos = tuple(n for n in items if _is_positional(n))
    if pos and not positional:
        raise AxisSpecError(
            f"{op}: axis_name {axis_name!r} contains the positional axis {pos[0]!r}; only "
            f"psum, pmean, pmax and pmin take positional axes (as in JAX)")
    if len(set(names)) != len(names):
        raise AxisSpecError(f"{op}: axis_name {axis_name!r} repeats a name")
    return (names, tuple(map(int, pos))) if positional else names


def _is_positional(n: Any) -> bool:
    return isinstance(n, numbers.Integral) and not isinstance(n, bool)


def _no_groups(groups: Any, op: str) -> None:
    if groups is not None:
        raise AxisSpecError(f"{op}: axis_index_groups={groups!r} is not supported; "
                            f"split the axis into two named axes instead")


def _engine_method(op: str, names: tuple):
    """The engine's own implementation of the collective ``op`` for these axes
    (``engine.collective(op)`` of the first frame binding one of them whose engine has
    one, :class:`named_axes._engine.Engine`), or None."""
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
    """``x`` as a NamedTensor (a plain tensor, number or numpy array: one with no
    names, as ``torch.as_tensor`` converts it)."""
    if type(x) is _NT:
        return x
    if isinstance(x, torch.Tensor):
        return NamedTensor._wrap(x, ())
    if isinstance(x, (bool, int, float, complex, np.ndarray, np.generic)):
        return NamedTensor._wrap(from_numpy(x) if isinstance(x, np.ndarray) else
                                 torch.as_tensor(x), ())
    raise AxisTypeError(f"{op}: {what} must be a tensor, NamedTensor, number or numpy array, got "
                        f"{type(x).__name__}")


def _check_bound_size(x: NamedTensor, name: Hashable, op: str) -> None:
    bound = bound_axes()
    if name in bound and bound[name] != x.named_shape[name]:
        raise AxisSizeError(f"{op}: axis {name!r} has size {x.named_shape[name]} in the value "
                            f"but {bound[name]} where it is bound")


def _norm(d: int, n: int, op: str, arg: str, where: str = "") -> int:
    """Positional dim ``d`` of ``n`` as a non-negative index (the one range check of
    ``nx.lax`` and ``nx.one_hot``); ``where`` says more about the value in the error."""
    if not isinstance(d, int) or not -n <= d < n:
        raise AxisSpecError(f"{op}: {arg}={d!r} is out of range for {n} positional dims{where}")
    return d + n if d < 0 else d


def _norm_dims(dims: Sequence[int], n: int, op: str, arg: str, where: str = "") -> tuple:
    """Each of ``dims`` through :func:`_norm`; an error when two name one dim."""
    out = tuple(_norm(d, n, op, arg, where) for d in dims)
    if len(set(out)) != len(out):
        raise AxisSpecError(f"{op}: {arg}={tuple(dims)} names one positional dim twice")
    return out
