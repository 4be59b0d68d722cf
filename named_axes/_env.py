"""The axis environment: which named axes are bound here, with which sizes.

xmap, vmap(axis_name=) and pmap push a frame binding their axis names; collectives
and reductions over a name that a value lacks read the size from here.  Frames are
per thread.  Outside every frame no axis is bound.

>>> from named_axes._env import bind, axis_size
>>> with bind({'batch': 4}):
...     axis_size('batch')
4
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Mapping

import torch

from . import _levels
from ._errors import UnboundAxisError, unbound_message
from ._torch_private import functorch_active, functorch_level

# Open name recorders (dicts name -> size), innermost last: NamedTensor._wrap notes in
# them the named axes of every value built while a differentiated function runs
# (transforms/_instances.py).
RECORDERS: list = []

# Open tapes (named_axes._tape.Tape), innermost last: each notes the NamedTensors built
# while its differentiated call runs (NamedTensor._wrap), only while RECORDERS is too.
TAPES: list = []

# Recorder key (see NamedTensor._wrap): names bound by frames opened while a
# differentiated function runs, i.e. a nested xmap's own axes (transforms/_instances.py).
class INNER:
    """The key itself (a class: dynamo compares classes by identity, not object())."""


# Recorder key: names a collective reduced a value replicated along (lax/_reductions.py):
# JAX transposes that per instance of them, so a pullback is never mapped over them.
class REPLICATED:
    """The key itself (as :class:`INNER`)."""

__all__ = ["Frame", "bind", "push", "pop", "bound_axes", "axis_size", "current_frame", "frames",
           "conflicts", "within", "resources", "enter_resource", "exit_resource",
           "set_rank_agreement", "rank_agreement"]


@dataclass(frozen=True)
class Frame:
    """One binding site: the axis sizes it introduces and how they are executed."""

    sizes: Mapping[Hashable, int]
    resources: Mapping[Hashable, Any] = field(default_factory=dict)
    engine: Any = None
    kind: str = "xmap"
    # Pairs of names mapped to one resource: they must never meet in one value.
    conflicts: frozenset = frozenset()
    # nx.vmap's ``randomness`` for its axis (how random ops draw along it); None: xmap's
    randomness: str | None = None


def xmap_frame(sizes: dict) -> Frame:
    """``Frame(sizes)`` without the frozen dataclass's slow ``__init__`` (xmap builds one
    per call)."""
    frame = object.__new__(Frame)
    frame.__dict__.update(sizes=sizes, resources={}, engine=None, kind="xmap",
                          conflicts=frozenset())
    return frame


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[Frame] = []
        self.bound: dict = {}
        self.conflicts: frozenset = frozenset()
        # whether a frame in ``stack`` has an engine (collectives then ask it first)
        self.engine: bool = False
        # (bound, conflicts, engine) as they were before each frame of ``stack`` was pushed
        self.saved: list[tuple] = []
        # the torch.func level active when each frame of ``stack`` was pushed
        self.levels: list = []
        # the resource contexts entered (``nx.Mesh``), outermost first
        self.resources: tuple = ()
        # while nx.vmap's named path runs: its handler of ops on named values (random
        # ones draw per its ``randomness``, transforms/_vmap)
        self.draws: Callable | None = None


_state = _State()


def frames() -> list[Frame]:
    """The frames in scope, outermost first."""
    return _state.stack


def resources() -> tuple:
    """The resource contexts in scope (the meshes entered, outermost first): a program
    traced under them holds their communication, so ``nx.jit`` keys programs by them."""
    return _state.resources


# How the ranks of the meshes in scope agree on a value: ``fn(int) -> [int per rank]``,
# registered by the parallel layer (nx.jit's programs on a mesh must be alike on every
# rank, :func:`rank_agreement`).
_AGREE: list = []


def set_rank_agreement(fn: Callable) -> None:
    _AGREE[:] = [fn]


def rank_agreement() -> Callable | None:
    """With a mesh in scope, the function gathering one int from every rank (the
    parallel layer's), else None."""
    return _AGREE[0] if _AGREE and _state.resources else None


def enter_resource(obj: Any) -> None:
    _state.resources = _state.resources + (obj,)


def exit_resource() -> None:
    _state.resources = _state.resources[:-1]


def bound_axes() -> dict:
    """All bound axis names with their sizes (innermost binding wins)."""
    return _state.bound


def conflicts() -> frozenset:
    """Pairs of axis names that may not co-occur in one value (from axis_resources)."""
    return _state.conflicts


def axis_size(name: Hashable, *, op: str | None = None) -> int:
    """The size of a bound axis; :class:`UnboundAxisError` if none binds it."""
    try:
        return _state.bound[name]
    except (KeyError, TypeError):
        raise UnboundAxisError(unbound_message(name, _state.bound, op=op)) from None


def current_frame(name: Hashable) -> Frame | None:
    """The innermost frame that binds ``name``, or None."""
    for frame in reversed(_state.stack):
        if name in frame.sizes:
            return frame
    return None


def push(frame: Frame) -> None:
    """Enter ``frame`` (pair with :func:`pop` in a ``finally``).

    The merged environment is updated incrementally (innermost binding wins); the
    dicts it replaces are never mutated, so a caller holding ``bound_axes()`` keeps a
    consistent snapshot.
    """
    st = _state
    bound, pairs = st.bound, st.conflicts
    st.saved.append((bound, pairs, st.engine))
    st.stack.append(frame)
    st.levels.append(functorch_level() if functorch_active()
                     and not torch.compiler.is_dynamo_compiling() else None)
    st.bound = {**bound, **frame.sizes} if bound else frame.sizes
    if frame.conflicts:
        st.conflicts = pairs | frame.conflicts
    if frame.engine is not None:
        st.engine = True
    if RECORDERS:
        for rec in RECORDERS:
            rec.setdefault(INNER, set()).update(frame.sizes)


def pop() -> None:
    """Leave the innermost frame, restoring the environment around it."""
    st = _state
    st.stack.pop()
    st.levels.pop()
    st.bound, st.conflicts, st.engine = st.saved.pop()


def _innermost_frame_level() -> tuple:
    """``(whether a frame is bound, the torch.func level when the innermost was pushed)``"""
    levels = _state.levels
    return (True, levels[-1]) if levels else (False, None)


_levels.frame_level = _innermost_frame_level   # _levels sits below this module


@contextlib.contextmanager
def bind(
    sizes: Mapping[Hashable, int],
    *,
    resources: Mapping[Hashable, Any] | None = None,
    engine: Any = None,
    kind: str = "xmap",
    conflicts: frozenset = frozenset(),
    randomness: str | None = None,
) -> Iterator[Frame]:
    """Bind axis names to sizes for the duration of the ``with`` block.  ``engine`` runs
    them (an ``_engine.Engine``: subclass ``_engine.EngineBase``)."""
    if engine is not None and not callable(getattr(engine, "collective", None)):
        raise TypeError(f"bind(engine=...): {type(engine).__name__} does not implement the "
                        f"engine interface (named_axes/_engine.py: subclass EngineBase)")
    frame = Frame(dict(sizes), dict(resources or {}), engine, kind, conflicts, randomness)
    push(frame)
    try:
        yield frame
    finally:
        pop()


# the context nx.vmap's randomness needs (transforms/_vmap registers its handler's)
DRAWS_SCOPE: list = [contextlib.nullcontext]


@contextlib.contextmanager
def untouched_draws() -> Iterator[None]:
    """Random ops draw as they would outside nx.vmap's ``randomness`` (the library's own:
    SerialLoop's probe; the calls made while nx.vmap's handler runs an op)."""
    saved, _state.draws = _state.draws, None
    try:
        yield
    finally:
        _state.draws = saved


@contextlib.contextmanager
def within(scope: list) -> Iterator[None]:
    """Run in the axis environment ``scope`` (a ``list(frames())`` taken earlier).

    For code that autograd runs later: a backward rule or a checkpoint's recomputation
    runs after the frames were left, or on autograd's thread for the device (CUDA, XLA),
    where this thread's frames are not seen.  The frames are pushed unless they are
    already the innermost ones here.
    """
    entered = scope if scope and _state.stack[-len(scope):] != scope else []
    for frame in entered:
        push(frame)
    try:   # (nx.vmap's randomness handler too, with its frames)
        with DRAWS_SCOPE[0]() if _state.draws is None and any(
                f.randomness for f in entered) else contextlib.nullcontext():
            yield
    finally:
        for _ in entered:
            pop()
