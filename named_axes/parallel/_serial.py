"""The serial-loop engine: axes mapped to ``SerialLoop(k)`` are computed in ``k`` chunks.

Each chunk runs the whole program on a ``1/k`` slice of every input along the loop
axis (a view: nothing is copied), so the peak memory of the mapped part falls to
about ``1/k``.  Outputs that carry the loop axis are concatenated; outputs that lack
it are replicated along it and taken from the first chunk.

Collectives over a loop axis need every chunk.  ``psum``, ``pmean``, ``pmax``,
``pmin`` and ``pdot`` are computed exactly by *replay*: the first pass runs each chunk
up to the first such collective, records its chunk-local partial result and stops
there; the partials are combined (sum / max / min); the next pass runs every chunk
again, now answering that collective with the combined value, up to the next one; and
so on.  A program with ``c`` collectives over loop axes costs at most ``c + 1``
partial passes (a collective over a pytree counts once) and stays exact and
differentiable.  ``axis_index`` gives each chunk its global indices.  Collectives whose
result is not a reduction (``all_gather``, ``ppermute``, ``pshuffle``, ``all_to_all``,
``psum_scatter``) over a loop axis raise :class:`SerialLoopError`.

Every chunk (in every pass) starts from the call's random state, and a random op on
values carrying a loop axis draws on the axis's whole (:meth:`SerialEngine.whole`), so
each chunk draws its part of the vectorized run's draws.  How the chunks' values are
taken together (layouts, comparisons, extremes) is :mod:`._serial_chunks`.

>>> import torch, named_axes as nx
>>> f = nx.xmap(lambda x: x * 2, in_axes=['i', ...], out_axes=['i', ...],
...             axis_resources={'i': nx.SerialLoop(2)})
>>> f(torch.arange(4.))
tensor([0., 2., 4., 6.])
"""
from __future__ import annotations

import contextlib
import itertools
import math
from functools import reduce
from typing import Any, Callable, Hashable

import torch

from .. import lax
from .._dispatch import READS_VALUES, dispatch
from .._engine import EngineBase, NeedsWholeAxes
from .._env import INNER, axis_size, bind, untouched_draws
from .._errors import AxisResourceError
from .._tensor import RECORDERS, NamedTensor
from .._tape import suspended
from .._torch_private import functorch_disabled, functorch_level, functorch_unwrapped, tree_map
from ..transforms._instances import REGIONS
from ..transforms._xla_rng import set_states, states
from ._serial_chunks import (ChunkWrites, _attaining, _equal, _extreme_of_chunks, _names_of,
                             _padded, _same_layout, _versions)

__all__ = ["SerialEngine", "SerialLoopError"]


class SerialLoopError(AxisResourceError):
    """A collective over a ``SerialLoop`` axis that cannot be computed chunk by chunk."""


def _check_replicated(items: list, j: int, loop_names: tuple) -> None:
    """An output lacking the loop axes is one value for every chunk: taken from the first
    chunk only if every chunk computed it (never a silent partial result)."""
    first = items[0]
    data0 = first._data if isinstance(first, NamedTensor) else first
    if not isinstance(data0, torch.Tensor) or type(data0) is not torch.Tensor:
        return   # numbers, or values that cannot be read (tracing)
    # out of functorch's wrappers (each batch dim moved to the front): values computed
    # under ``vmap`` are compared, every batch entry at once
    data0 = functorch_unwrapped(data0)
    for c, x in enumerate(items[1:], 1):
        data = x._data if isinstance(x, NamedTensor) else x
        if not (type(data) is torch.Tensor and _equal(functorch_unwrapped(data), data0)):
            raise SerialLoopError(
                f"output {j} lacks the SerialLoop axes {loop_names} but chunk {c} computed "
                f"a different value than chunk 0: it depends on the chunk. Reduce across "
                f"the loop axis with nx.lax (psum, pmean, ...) or let out_axes place it")


def _refuse_trace() -> None:
    """Refuse make_fx's trace, whose tensors have no values to replay the chunks on
    (dynamo breaks the graph at ``.item()`` and runs the loop eagerly)."""
    with functorch_disabled(), untouched_draws():   # (past vmap's randomness checks)
        try:
            int(torch.randint(0, 2**62, ()).item())
        except RuntimeError as e:
            if type(e).__name__ not in READS_VALUES:
                raise
            raise AxisResourceError(
                "a SerialLoop axis inside nx.jit / make_fx: the loop replays its chunks on "
                "values, which a trace does not have; call the xmap eagerly or under "
                "torch.compile, or map the axis to a mesh axis (or to nothing: "
                "vectorized)") from None


class _Pause(BaseException):
    """Stops a chunk at the first collective whose cross-chunk value its engine (the arg) lacks."""


_REDUCING = {"psum": "sum", "pmean": "sum", "pdot": "sum", "pmax": "max", "pmin": "min"}
_UNSUPPORTED = ("all_gather", "ppermute", "pshuffle", "all_to_all", "psum_scatter")


def _as_tuple(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _carries(x: Any, name: Hashable) -> bool:
    return isinstance(x, NamedTensor) and name in x._names


class SerialEngine(EngineBase):
    """Runs ``body`` chunk by chunk over the loop axes of a plan (see the module docstring).

    Args:
        loops: named axis -> number of chunks.
        axis_sizes: named axis -> full size.
        inner: the engine that runs each chunk (``None``: plain local execution).

    ``within``: the DTensor engine computing a chunk's mesh axes (it sets itself there),
    which answers for those axes, its collectives included.
    """

    def __init__(self, loops: dict, axis_sizes: dict, inner: Any = None) -> None:
        self.loops = dict(loops)
        self.names = tuple(self.loops)
        self.sizes = dict(axis_sizes)
        self.inner = inner
        self.within: Any = None
        self._known: list = []       # per collective index: {key: combined value}
        self._sigs: list = []        # per collective index: (op, names) for a sanity check
        self._pending: dict = {}     # per collective index: {key: [chunk partials]}
        self._deferring, self._paused_tree = 0, False
        self._chunk: tuple = ()
        self._whole: tuple = ()      # split axes an op now holds whole (the mesh's ``whole``)
        self._call = self._bypass = 0
        # in :meth:`run` or a chunk :meth:`resume_here` re-entered: True; after a run:
        # False; None in a subclass with its own ``run`` (the mesh's: no chunks to be gone)
        self._running: bool | None = None
        self.passes = 0              # how many passes the last run needed

    # -- running -------------------------------------------------------------------------
    def chunk_size(self, name: Hashable) -> int:
        return self.sizes[name] // self.loops[name]

    def _cuts(self, names: tuple) -> tuple:
        """``(dim, start, size)`` of the running chunk along each loop axis of ``names``."""
        return tuple((i, self._chunk[self.names.index(n)] * self.chunk_size(n), self.chunk_size(n))
                     for i, n in enumerate(names) if n in self.loops)

    def _slice(self, leaf: Any) -> Any:
        """The running chunk of an input leaf (a view)."""
        if not isinstance(leaf, NamedTensor):
            return leaf
        data = leaf._data
        for dim, start, size in self._cuts(leaf._names):
            data = data.narrow(dim, start, size)
        return NamedTensor._wrap(data, leaf._names)

    @torch.compiler.disable   # (under torch.compile: eagerly, outside dynamo's graph)
    def run(self, body: Callable, leaves: list) -> list:
        """Run ``body`` over every chunk (replaying for loop collectives); the full outputs."""
        self._running = True
        try:
            return self._passes(body, leaves)
        finally:
            self._running = False

    def _passes(self, body: Callable, leaves: list) -> list:
        grid = list(itertools.product(*(range(self.loops[n]) for n in self.names)))
        start = states(any(type(x) is NamedTensor and x._data.device.type == "xla" for x in leaves))
        _refuse_trace()
        self._known, self._sigs, self.passes, self.within = [], [], 0, None
        self._gens: dict = {}   # id -> (a generator= of a draw, its state at first sight)
        before, kept = _versions(leaves, self.names), ChunkWrites(leaves, self.names)
        while True:
            self.passes += 1
            self._pending, paused, self._deferring, self._paused_tree = {}, False, 0, False
            outs = []
            for chunk in grid:
                self._chunk, self._call = chunk, 0
                sliced = [self._slice(x) for x in leaves]
                kept.restore()   # (each chunk starts from the call's state: ChunkWrites)
                try:   # each chunk draws as the unsplit run (a random op along a loop
                    # axis draws on its whole, :meth:`whole`), from the call's random state
                    set_states(start)
                    for gen, state in self._gens.values():
                        gen.set_state(state)
                    self._level = functorch_level()
                    with kept.watching(chunk == grid[0]):
                        outs.append(body(sliced, engine=self) if self.inner is None
                                    else self.inner.run(body, sliced, engine=self))
                except _Pause as pause:   # (a nested xmap's loop passes the outer's on)
                    if pause.args[0] is not self:
                        raise
                    paused = True
            if not paused:
                return self._assemble(outs, grid)
            if _versions(leaves, self.names) != before:   # (the next pass would write them again)
                raise SerialLoopError(
                    f"an input written in place before a collective over the SerialLoop axes "
                    f"{self.names}: the loop replays each chunk up to every such collective, "
                    f"which would write it again; write into a copy (x = x.clone())")
            for j in sorted(self._pending):   # one or (a pytree's leaves) several
                kind = _REDUCING[self._sigs[j][0]]
                if kind == "sum":
                    known = {k: reduce(torch.add, v) for k, v in self._pending[j].items()}
                else:
                    known = {k: _extreme_of_chunks(v, kind) for k, v in self._pending[j].items()}
                self._known.append(known)

    def _assemble(self, outs: list, grid: list) -> list:
        index = {c: i for i, c in enumerate(grid)}
        result = []
        for j in range(len(outs[0])):
            outs = _same_layout(outs, j)
            first = outs[0][j]
            if not isinstance(first, NamedTensor) or not any(n in first._names for n in self.names):
                _check_replicated([o[j] for o in outs], j, self.names)
                result.append(first)
                continue

            def build(prefix: tuple, depth: int):
                if depth == len(self.names):
                    return outs[index[prefix]][j]._data
                name = self.names[depth]
                if name not in first._names:
                    return build(prefix + (0,), depth + 1)
                parts = [build(prefix + (c,), depth + 1) for c in range(self.loops[name])]
                return torch.cat(parts, dim=first._names.index(name))

            result.append(NamedTensor._wrap(build((), 0), first._names))
        return result

    def resume_here(self) -> Callable:
        """A context manager factory re-entering the running chunk at this point for code run
        later (a checkpoint's recomputation): its indices, the collectives' values known then."""
        here = (self._chunk, self._call, self._whole, True, self._known[:])

        @contextlib.contextmanager
        def resumed():
            saved = (self._chunk, self._call, self._whole, self._running, self._known)
            self._chunk, self._call, self._whole, self._running, self._known = here
            try:
                with contextlib.suppress(_Pause):   # (stops where its forward paused)
                    yield
            finally:
                self._chunk, self._call, self._whole, self._running, self._known = saved

        return resumed

    # -- the engine interface (named_axes/_engine.py) ------------------------------------
    def collective(self, op: str):
        if self._bypass:  # nx.lax computes the chunk-local result (over the mesh, ``within``)
            return self.within.collective(op) if self.within is not None else None
        if op in _REDUCING:
            return lambda *a, **k: self._reducing(op, *a, **k)
        if op in _UNSUPPORTED:
            return lambda *a, **k: self._unsupported(op, *a, **k)
        if op == "axis_index":
            return self._axis_index
        return self._pieces().collective(op)

    def _pieces(self) -> Any:
        """The engine that computes a chunk's other axes: ``within``, else ``inner``, else
        the "no engine" answers."""
        if self.within is not None:
            return self.within
        return self.inner if self.inner is not None else _NO_ENGINE

    # what happens to a chunk's values is the inner engine's business (the mesh's)
    def broadcast(self, data: Any, names: tuple, result: tuple) -> Any:
        return self._pieces().broadcast(data, names, result)

    def seed_size(self, name, local: int) -> int:
        return self._pieces().seed_size(name, local)

    def first_copy(self, data: Any, dim: int, name) -> Any:
        return self._pieces().first_copy(data, dim, name)

    def _default(self, op: str, args: tuple, kwargs: dict, whole: tuple = ()):
        """The collective ``op(*args, **kwargs)`` as if no loop existed (on this chunk),
        computed by nx.lax.

        Loop axes carried by the operands are bound at their chunk size meanwhile, so
        nx.lax sees consistent sizes; loop axes they lack keep their full size (a psum
        over one multiplies by the full size), as do those in ``whole`` (the operands
        carry them whole: the local-shard path gathered them)."""
        local = {n: self.chunk_size(n) for n in self.names   # (``within`` binds the ones
                 if n not in whole + self._whole                 # it splits: its collective)
                 and not self._split_within(n) and any(_carries(a, n) for a in args[:2])}
        # this frame is the engine's own: a differentiated function running around it
        # must not take its names for axes bound inside that function
        saved = [(rec, set(rec[INNER]) if INNER in rec else None) for rec in RECORDERS]
        self._bypass += 1
        try:
            with bind(local, kind="serial-chunk"):
                return getattr(lax, op)(*args, **kwargs)
        finally:
            self._bypass -= 1
            for rec, inner in saved:
                if inner is None:
                    rec.pop(INNER, None)
                else:
                    rec[INNER] = inner

    def _reducing(self, op: str, *args, **kwargs):
        operands = args[:2] if op == "pdot" else args[:1]   # nx.lax passes them positionally
        axis_name = args[len(operands)]
        names = _as_tuple(axis_name)
        carried = [n for n in self.names if n in names and n not in self._whole
                   and any(_carries(v, n) for v in operands)]
        if op == "pmean" and carried:
            total = self._reducing("psum", *args, **kwargs)
            return self._mean(total, math.prod(self.sizes.get(n) or axis_size(n) for n in names))
        if carried:
            self._check_running(op, carried[0])
            self._check_not_differentiated(op, carried)
        local = self._default(op, args, kwargs)
        if not carried:
            return local
        return self._combine(op, axis_name, names, operands, carried, local)

    def _mean(self, total: Any, count: int) -> Any:
        """``pmean`` from the ``psum`` over every chunk."""
        return total / count

    def _combine(self, op: str, axis_name: Any, names: tuple, operands: tuple,
                 carried: list, local: Any) -> Any:
        """The collective's value over every chunk, from this chunk's ``local`` part over
        the ``carried`` loop axes: recorded for the next pass, or answered by it."""
        j = self._call
        self._call += 1
        key = tuple(c for n, c in zip(self.names, self._chunk) if n not in carried)
        if j < len(self._known):
            if self._sigs[j] != (op, names):
                raise SerialLoopError(
                    f"{op}(axis_name={axis_name!r}) under SerialLoop: the program called "
                    f"collectives in a different order in another chunk ({self._sigs[j]}); "
                    f"SerialLoop needs the same sequence of collectives in every chunk")
            known = self._known[j][key]
            if _names_of(known) != _names_of(local):
                raise SerialLoopError(
                    f"{op}(axis_name={axis_name!r}) under SerialLoop: the value it combines "
                    f"carries named axes {_names_of(local)} in this pass but "
                    f"{_names_of(known)} in the pass that computed it (axes made afresh on "
                    f"every call, as nx.vmap's, cannot be replayed); move the collective out "
                    f"of the nx.vmap, or map its axis to a mesh axis")
            return known
        if j == len(self._sigs):
            self._sigs.append((op, names))
        if op in ("pmax", "pmin"):   # with how many entries attain it (ties share evenly)
            count = _attaining(operands[0], local)
            if self.within is not None:   # on every rank of the mesh axes it reduced too
                count = self.within.count_over_ranks(count, names)
            local = (local, count)
        self._pending.setdefault(j, {}).setdefault(key, []).append(local)
        if self._deferring:   # inside tree(): the pause waits for the last leaf
            self._paused_tree = True
            return local[0] if isinstance(local, tuple) else local
        raise _Pause(self)

    @contextlib.contextmanager
    def tree(self):
        """Collectives over the leaves of one pytree (``psum(grads, 'batch')``) share a pass.

        The leaves' results are not read until the whole tree is reduced, so each unknown
        one records its chunk's partial and returns it as a stand-in; the pass pauses at
        the end of the tree, and the next pass answers every leaf. A gradient tree with
        ``L`` leaves costs one replay, not ``L``.
        """
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and self._paused_tree:
            self._paused_tree = False
            raise _Pause(self)

    def _check_not_differentiated(self, op: str, carried: list) -> None:
        """Refuse a loop collective inside a derivative taken within the body.

        A replayed value comes from an earlier pass: outer autograd reaches the inputs
        through that pass's graph, but a derivative taken inside the body (``nx.grad``,
        ``vjp``, ``jvp``, torch.func transforms) would see a constant (a zero gradient),
        and its transpose would need every chunk's cotangents at once."""
        inside = [r for r in REGIONS if not set(carried) <= set(r.seen.get(INNER, ()))]
        if inside or functorch_level() != self.__dict__.get("_level"):
            n = carried[0]
            raise SerialLoopError(
                f"{op} over axis {n!r} inside a derivative taken within the xmap body: {n!r} "
                f"is mapped to SerialLoop({self.loops[n]}), whose chunks run one after the "
                f"other, so the derivative of a value combined across them cannot be taken "
                f"chunk by chunk; take the gradient outside the xmap (nx.grad(xmap(...))), or "
                f"map {n!r} to a mesh axis")

    def _check_running(self, op: str, n: Hashable) -> None:
        """Refuse a loop collective (or ``axis_index``) in code that autograd runs after
        the call returned, whose chunks are gone: a custom rule's backward."""
        if self._running is False:
            raise SerialLoopError(
                f"{op} over axis {n!r} in code run after the xmap call returned (a custom "
                f"rule's backward, run by autograd): {n!r} is mapped to SerialLoop("
                f"{self.loops[n]}), whose chunks ran one after the other and are gone; "
                f"compute it in the forward (as a residual), or map {n!r} to a mesh axis")

    def _unsupported(self, op: str, x: Any, axis_name: Any, **options):
        """A collective moving values along axes (``all_gather``, ``ppermute``, ...): over
        the split ones, :meth:`_moving`; else chunk-local."""
        split = tuple(n for n in _as_tuple(axis_name) if n in self.loops)
        if not split:
            return self._default(op, (x, axis_name), options)
        return self._moving(op, x, axis_name, split, options)

    def _moving(self, op: str, x: Any, axis_name: Any, split: tuple, options: dict):
        """Refused: the collective needs values from several chunks at once."""
        n = split[0]
        raise SerialLoopError(
            f"{op}(x, axis_name={axis_name!r}): axis {n!r} (size {self.sizes[n]}) is mapped "
            f"to SerialLoop({self.loops[n]}), and {op} needs values from several chunks at "
            f"once, which a serial loop never holds; map {n!r} to a mesh axis or drop it "
            f"from axis_resources")

    def _axis_index(self, axis_name: Any):
        names = _as_tuple(axis_name)
        if not any(n in self.loops for n in names):
            return self._default("axis_index", (axis_name,), {})
        if len(names) != 1:   # linearized row-major, as JAX's
            out, stride = 0, 1
            for n in reversed(names):
                out = out + self._axis_index(n) * stride
                stride *= axis_size(n)
            return out
        n = names[0]
        self._check_running("axis_index", n)
        start = self._chunk[self.names.index(n)] * self.chunk_size(n)
        if self._split_within(n):   # the chunk's part split over the mesh
            return self._default("axis_index", (axis_name,), {}) + start
        return NamedTensor._wrap(torch.arange(start, start + self.chunk_size(n)), (n,))

    def _split_within(self, name: Hashable) -> bool:
        """Whether the chunk's part of ``name`` is split further over the mesh (``within``)."""
        return self.within is not None and self.within.splits(name)

    def splits(self, name: Hashable) -> bool:
        """Whether ``name`` is computed in pieces here (each chunk holds part of it)."""
        if name in self.loops:
            return self.loops[name] > 1 and name not in self._whole
        return self._split_within(name)

    def local_size(self, name: Hashable) -> int:
        """How many entries of ``name`` the chunk running now holds."""
        if self._split_within(name):
            return self.within.local_size(name)
        return self.chunk_size(name) if name in self.loops else self.sizes[name]

    def check_contraction(self, held: tuple, contracted: tuple) -> None:
        if self.within is not None:
            self.within.check_contraction(held, contracted)

    def check_draw(self, op: str, names: tuple) -> None:
        if self.within is not None:
            self.within.check_draw(op, names)
        split = tuple(n for n in names if n in self.loops and self.splits(n))
        if split:
            raise NeedsWholeAxes(self, split)

    def whole(self, func: Callable, args: tuple, kwargs: dict, names: tuple) -> Any:
        """A random op ``func`` along the loop axes ``names`` (:meth:`check_draw`): run on
        operands padded to their whole (the chunk in its place), the chunk's part kept,
        so each chunk keeps its part of the unsplit run's draws."""
        gen = kwargs.get("generator")   # (each chunk draws from where it was first seen)
        if gen is not None:
            self._gens.setdefault(id(gen), (gen, gen.get_state()))
        padded = tree_map(lambda v: _padded(v, self._cuts, self.sizes, names, True),
                          (args, kwargs))
        self._whole += names
        try:
            with suspended():   # the caller's dispatch notes the op as it was asked
                out = dispatch(func, *padded)
        finally:
            self._whole = self._whole[:-len(names)]
        return tree_map(lambda v: _padded(v, self._cuts, self.sizes, names, False), out)

    def check_named_op(self, op: str, names: tuple) -> None:
        """Raise for an op (not a collective) that mixes values along a loop axis (and let
        ``within`` vet the others)."""
        if self.within is not None:
            self.within.check_named_op(op, tuple(n for n in names if n not in self.loops))
        for n in names:
            if n in self.loops and self.loops[n] > 1:   # one chunk sees every entry
                raise SerialLoopError(
                    f"{op} over axis {n!r}: {n!r} is mapped to SerialLoop({self.loops[n]}), so "
                    f"each chunk holds {self.chunk_size(n)} of its {self.sizes[n]} entries; "
                    f"reduce it with nx.lax.psum/pmean/pmax/pmin (which combine the chunks) "
                    f"or map it to a mesh axis")


_NO_ENGINE = EngineBase()

