"""The engine interface: what a named program asks of the engine that runs its axes.

An engine (a ``SerialLoop``'s chunks, the DTensor engine, torch-xla SPMD) is bound with
the axes it runs (``_env.bind(sizes, engine=...)``); ``nx.lax``, einsum and the rules find
it with :func:`engine_for` and ask it only through the methods of :class:`EngineBase`.

>>> import torch, named_axes as nx
>>> from named_axes import _env
>>> from named_axes._engine import EngineBase
>>> class Doubling(EngineBase):   # psum computed by the engine, all else as usual
...     def collective(self, op):
...         return (lambda x, names: 2 * nx.sum(x, names[0])) if op == "psum" else None
>>> with _env.bind({'i': 3}, engine=Doubling()):
...     float(nx.lax.psum(nx.named(torch.ones(3), 'i ...'), 'i'))
6.0
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Hashable

import torch

from ._env import _state, current_frame
from ._torch_private import is_functorch_wrapped

__all__ = ["COLLECTIVES", "Engine", "EngineBase", "NeedsWholeAxes", "broadcast_operands",
           "engine_for", "handed", "may_need_grad", "split_over_ranks"]

# The collectives an engine may compute itself (``Engine.collective``), with the
# arguments each receives: ``(x: NamedTensor, axis_names: tuple, **options)`` --
# ``all_gather(axis=, tiled=)``, ``psum_scatter(scatter_dimension=, tiled=)``,
# ``all_to_all(split_axis=, concat_axis=, tiled=)``, ``ppermute(perm=)``, ``pshuffle(perm=)``;
# ``pdot(x, y, axis_names, pos_contract=, pos_batch=)``; ``axis_index(axis_names)``.
COLLECTIVES = frozenset({"psum", "pmean", "pmax", "pmin", "pdot", "all_gather",
                         "psum_scatter", "all_to_all", "ppermute", "pshuffle", "axis_index"})


class NeedsWholeAxes(Exception):
    """Raised where the engine computes an op along its split axes ``names`` on their
    whole: the caller then calls ``engine.whole(func, args, kwargs, names)`` instead."""

    def __init__(self, engine: Any, names: tuple) -> None:
        super().__init__(names)
        self.engine, self.names = engine, names


class EngineBase:
    """What a named program asks of the engine that runs its axes, each answer here "as
    if no engine were there": an engine subclasses it and overrides what differs.

    An engine whose :meth:`check_named_op` raises :class:`NeedsWholeAxes` also defines
    ``whole(func, args, kwargs, names, run=None)``: ``func(*args, **kwargs)`` computed on
    the whole of the split axes ``names`` (``run(func, args, kwargs)``, default the
    dispatcher).
    """

    def collective(self, op: str) -> Callable | None:
        """The engine's own implementation of the collective ``op`` (one of
        :data:`COLLECTIVES`), or None: ``nx.lax`` computes it locally."""
        return None

    def tree(self) -> ContextManager:
        """A context around a collective over every leaf of one pytree (a SerialLoop
        reduces them all in one replay)."""
        return contextlib.nullcontext()

    def broadcast(self, data: Any, names: tuple, result: tuple) -> Any:
        """The data to use for an operand's ``data`` (named ``names``) about to meet values
        carrying the axes ``result`` (the local-shard path puts the sum its cotangent will
        need on its path).  Asked for every operand of every op, einsum and ``pdot``."""
        return data

    def splits(self, name: Hashable) -> bool:
        """Whether ``name`` is computed in pieces here (each piece holds part of it)."""
        return False

    def seed_size(self, name: Hashable, local: int) -> int:
        """How many instances of ``name`` a derivative's seed on this piece stands for,
        given the ``local`` ones it holds (a mesh: every rank's, as the loss lacking
        ``name`` is the same on all)."""
        return local

    def first_copy(self, data: Any, dim: int, name: Hashable) -> Any:
        """``data``, equal copies along ``name`` (physical dim ``dim``), as one copy,
        where a derivative reaches (a mesh: the rank holding the first index takes the
        whole cotangent, the others none)."""
        return data.select(dim, 0)

    def local_size(self, name: Hashable) -> int:
        """How many entries of ``name`` the piece running now holds."""
        return current_frame(name).sizes[name]

    def sum_pieces(self, local: Callable, names: tuple, operands: tuple) -> Any:
        """An einsum's result summed over every piece, ``local()`` being this piece's
        (physical, its part of the split axes ``names`` contracted); or None, without
        calling ``local``: the einsum keeps those axes in its product and ``psum`` sums
        them (a SerialLoop replays it)."""
        return None

    def check_named_op(self, op: str, names: tuple) -> None:
        """Raise for an op (not a collective) that mixes values along axes split here
        (:class:`NeedsWholeAxes` where ``whole`` computes it)."""
        return None

    def check_draw(self, op: str, names: tuple) -> None:
        """Raise :class:`NeedsWholeAxes` for the axes of ``names`` split here that a random
        op ``op`` on values carrying them draws along: drawn on their whole, each piece
        keeps its part of the unsplit run's draws."""
        return None

    def check_contraction(self, held: tuple, contracted: tuple) -> None:
        """Raise :class:`NeedsWholeAxes` for the axes of ``contracted`` (split here, an
        einsum or ``pdot`` sums over them) that its operands, holding ``held``, cannot sum
        piece by piece."""
        return None


Engine = EngineBase   # the interface's name in annotations and docs


def engine_for(names) -> Engine | None:
    """The engine of the innermost frame binding one of ``names`` (the first that has
    one), or None -- at once when no frame in scope has an engine (plain xmap)."""
    if not _state.engine:
        return None
    for n in names:
        frame = current_frame(n)
        if frame is not None and frame.engine is not None:
            return frame.engine
    return None


def broadcast_operands(args: tuple, kwargs: dict, named: type) -> tuple | None:
    """``(args, kwargs)`` with each tensor operand (a list argument's members too) that
    may need a gradient handed through ``engine.broadcast`` against the union of the
    operands' names (``named``: the NamedTensor class); None if nothing changed."""
    operands = [w for v in (*args, *kwargs.values())
                for w in (v if isinstance(v, (list, tuple)) else (v,))]
    names = tuple(dict.fromkeys(n for v in operands if type(v) is named for n in v._names))
    engine = engine_for(names) if names else None
    if engine is None:
        return None
    changed = []

    def hand(v):
        data, own = (v._data, v._names) if type(v) is named else (v, ())
        if not isinstance(data, torch.Tensor) or not may_need_grad(data):
            return v
        new = engine.broadcast(data, own, names)
        if new is data:
            return v
        changed.append(v)
        return named._wrap(new, own) if own else new

    def each(v):
        if not isinstance(v, (list, tuple)):
            return hand(v)
        members = [hand(w) for w in v]
        return v if all(m is w for m, w in zip(members, v)) else type(v)(members)

    new_args = tuple(each(v) for v in args)
    new_kwargs = {k: each(v) for k, v in kwargs.items()}
    return (new_args, new_kwargs) if changed else None


def split_over_ranks(name: Hashable) -> bool:
    """Whether a mesh engine splits ``name`` over ranks, each holding the whole cotangent
    of a value lacking it (:meth:`Engine.seed_size` counts every rank's instances) -- not a
    SerialLoop, whose chunks hold parts that autograd adds up."""
    engine = engine_for((name,))
    return engine is not None and engine.seed_size(name, 1) != 1


def may_need_grad(t: torch.Tensor) -> bool:
    """Whether a derivative may reach ``t``: it requires grad with grad mode on (under
    ``no_grad`` no op records it), or a functorch transform wraps it (under
    ``jvp``/``grad`` the wrapper does not say)."""
    return (t.requires_grad and torch.is_grad_enabled()) or is_functorch_wrapped(t)


def handed(data: Any, names: tuple, result: tuple) -> Any:
    """``data`` (named ``names``) as the engine running ``result``'s axes wants it for an
    op whose values carry ``result`` (:meth:`Engine.broadcast`; as it is without one)."""
    engine = engine_for(result) if _state.engine else None
    return data if engine is None else engine.broadcast(data, names, result)
