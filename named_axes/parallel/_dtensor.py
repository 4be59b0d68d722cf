"""The torch.distributed engine: named axes split over a ``DeviceMesh``, one process per
device (``torchrun``; gloo on CPU, nccl on GPU).

As ``shard_map`` does, every rank runs the named program once on plain tensors, its own
slice of every axis the plan splits; collectives over those axes are explicit all-reduces
over the mesh dims that split them (:mod:`._local_comms`), an op or collective along a
split axis runs on the axis gathered whole, and everything else is a local op.  It is the
SerialLoop engine with one chunk per rank and real communication in place of the replay.
Inputs, outputs, gradients and checks: docs/parallelism.md, "torch.distributed (DTensor)".
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from .._dispatch import dispatch
from .._engine import NeedsWholeAxes, may_need_grad
from .._errors import AxisResourceError
from .._layout import call
from .._registry import is_inplace, op_name
from .._tape import suspended
from .._tensor import NamedTensor, data_and_names
from .._torch_private import (functorch_active, functorch_transform_kinds,
                              tracing_mode_active, tree_map)
from ._serial import SerialEngine, _as_tuple, _attaining, _names_of
from ._serial_chunks import _in_memory_order
from ._dtensor_comms import (SUMMARY, FromLocal, FullInputs, ShardsOf, device_mesh,
                             placements as _placements, rewrap)
from ._local_comms import (ChunkOfWhole, ExtremeOverRanks, FirstCopy, GatherOverRanks,
                           ScatterSumOverRanks, SumOverRanks, Varying, all_reduce, extreme,
                           mesh_groups, own_block)
from ._rank_check import check_once

__all__ = ["DTensorEngine", "device_mesh"]


def _transformed(out) -> bool:
    """Whether a ``vmap`` runs around the call or ``out`` is a forward-mode dual: a DTensor
    cannot hold either, so full outputs are gathered by the path's own Functions."""
    from ..lax._ops import forward_mode

    return forward_mode(out) or any(k != "Grad" for k in functorch_transform_kinds())


def _fmt_place(placements) -> str:
    return "[" + ", ".join(str(p) for p in placements) + "]"


class DTensorEngine(SerialEngine):
    """Runs ``body`` once on this rank's shards (see the module docstring)."""

    def __init__(self, plan, mesh, *, outputs: str = "auto") -> None:
        split = {n: plan.mesh_shards(n) for n in plan.mesh_axes if plan.mesh_shards(n) > 1}
        super().__init__(split, plan.axis_sizes)
        self.plan, self.mesh, self.outputs = plan, mesh, outputs
        self.on_mismatch = getattr(mesh, "on_mismatch", "redistribute")
        self.dm = device_mesh(mesh)
        if self.dm.get_coordinate() is None:   # (it would have no shard to compute)
            raise AxisResourceError(
                f"xmap with axis_resources {dict(plan.mesh_axes)} on rank "
                f"{torch.distributed.get_rank()}, which is not in the mesh in scope (ranks "
                f"{self.dm.mesh.flatten().tolist()}); call it only on the mesh's ranks")
        self.sharded_in = False
        self.device = torch.device("cuda", torch.cuda.current_device()) \
            if self.dm.device_type == "cuda" else torch.device("cpu")
        order = list(plan.mesh_axis_names)   # the DeviceMesh's dims, in order
        self.mesh_dims = {n: tuple(order.index(a) for a in plan.mesh_axes[n]) for n in self.names}
        # this rank's chunk of each split axis
        self._chunk = tuple(own_block(mesh_groups(self.dm, self.mesh_dims[n]))[0]
                            for n in self.names)

    # -- running -------------------------------------------------------------------------
    # (xmap hands a mesh call under torch.compile to nx.jit; should dynamo reach the
    # engine otherwise, it runs eagerly, outside dynamo's graph)
    @torch.compiler.disable
    def run(self, body: Callable, leaves: list, engine: Any = None) -> list:
        """``body`` on this rank's shards; in a chunk of the SerialLoop engine ``engine``,
        that engine runs the body's frame and asks this one for the mesh's axes."""
        SUMMARY.calls += 1
        # once per new input structure (every rank runs the same SerialLoop chunks);
        # a trace has no values to check
        if not tracing_mode_active() and check_once(self.mesh._cache, leaves):
            SUMMARY.input_checks += 1
        self._parts: dict = {}    # id(an input's local value) -> (it, its part view, parts)
        self._varying: dict = {}  # id(a value handed to split uses) -> (it, mesh dims)
        self._broadcasts: dict = {}
        self._same: dict = {}     # (names, axes made whole) -> _same_dims
        self._whole: tuple = ()      # the split axes ops now run on whole (:meth:`whole`)
        if engine is not None:
            engine.within = self
            # ('x', SerialLoop): the loop's chunk, split over the ranks
            for n in set(engine.loops) & set(self.loops):
                self.sizes[n] = engine.chunk_size(n)
        try:
            outs = body(self._to_local(leaves), engine=self if engine is None else engine)
            outs = [self._to_output(o) for o in outs]
        except NeedsWholeAxes as e:   # an op along a split axis the dispatcher did not see
            raise AxisResourceError(
                f"an op along the axes {e.names} split over the mesh ran outside the named "
                f"dispatcher, which computes such ops on their whole; report this program"
            ) from None
        SUMMARY.local_shard_runs += 1
        return outs

    def _check_names(self, names: tuple, what: str) -> None:
        self.plan.check_value(names, what)
        for n in names:
            if not self.plan.in_mesh_order(n):
                axes = self.plan.mesh_axes[n]
                raise AxisResourceError(
                    f"axis_resources maps axis {n!r} to mesh axes {axes!r}, against the mesh's "
                    f"axis order {self.plan.mesh_axis_names!r}; the DTensor engine splits a dim "
                    f"over several mesh axes in mesh order only: list them in that order")

    def _laid_out(self, data: Any, names: tuple, what: str) -> Any:
        """A DTensor input laid out as the plan says: redistributed where it is not
        (differentiably: its gradient comes back in its own layout), or refused with
        ``on_mismatch='error'``."""
        if data.device_mesh != self.dm:
            raise AxisResourceError(
                f"{what} (named axes {names!r}) is a DTensor over mesh "
                f"{data.device_mesh!r}, but this xmap runs on {self.dm!r}; "
                f"make it over the mesh in scope (nx.NamedSharding(mesh, ...))")
        want = _placements(self.plan, names, data.dim() - len(names))
        if tuple(data.placements) == tuple(want):
            SUMMARY.sharded_inputs += 1
            return data
        have = _fmt_place(data.placements)
        if self.on_mismatch == "error":
            raise AxisResourceError(
                f"{what} (named axes {names!r}, global shape {tuple(data.shape)}) is a DTensor "
                f"laid out {have} over mesh axes {self.plan.mesh_axis_names!r}, but "
                f"axis_resources {self.plan.resources!r} places it {_fmt_place(want)}; make "
                f"it with that layout (nx.device_put(x, nx.NamedSharding(mesh, "
                f"{dict(self.plan.resources)!r}), axes=...)) or use "
                f"Mesh(..., on_mismatch='redistribute')")
        SUMMARY.redistributed_inputs += 1
        SUMMARY.redistributions.append((f"{what} {names!r}", have, _fmt_place(want)))
        return data.redistribute(self.dm, want)

    def _to_local(self, leaves: list) -> list:
        """This rank's shard of each input leaf: a full input's chunk (a view), a DTensor's
        local shard (:meth:`_laid_out`).  Those that need a gradient go through
        :class:`FullInputs` / :class:`ShardsOf`, the parts of all their gradients summed
        in one flat all-reduce; a DTensor's gradient comes back laid out like it."""
        out, full, laid_out = list(leaves), [], []
        for i, leaf in enumerate(leaves):
            pair = data_and_names(leaf)
            if pair is None:
                continue
            data, names = pair
            self._check_names(names, f"argument leaf {i}")
            dtensor = type(data).__name__ == "DTensor"
            if dtensor:
                data = self._laid_out(data, names, f"argument leaf {i}")
                self.sharded_in = True
            else:
                data = data.to(self.device)
                SUMMARY.distributed_inputs += 1
            if data.requires_grad and torch.is_grad_enabled():
                (laid_out if dtensor else full).append((i, data))
            else:
                out[i] = rewrap(leaf, data.to_local()) if dtensor else \
                    self._slice(rewrap(leaf, data))
        layouts = tuple(self._layout(getattr(leaves[i], "_names", ())) for i, _ in full)
        for members, edge in ((full, lambda parts, *xs: FullInputs.apply(parts, layouts, *xs)),
                              (laid_out, functools.partial(ShardsOf.apply, self.dm))):
            if members:
                parts = [(self.dm, set()) for _ in members]
                views = edge(parts, *[data for _, data in members])
                for j, (i, _) in enumerate(members):
                    value, part = views[j], views[len(members) + j]
                    self._parts[id(value)] = (value, part, parts[j])
                    out[i] = rewrap(leaves[i], value)
        return out

    def _to_output(self, leaf: Any) -> Any:
        """An output leaf as the engine returns it: full (a replicated one as it is, a
        split one gathered, or through a DTensor), or a DTensor laid out per the plan;
        ``Mesh(outputs='auto')``: full unless some input was a DTensor."""
        pair = data_and_names(leaf)
        if pair is None:
            return leaf
        data, names = pair
        mode = self.outputs
        if mode == "auto":
            mode = "sharded" if self.sharded_in else "full"
        split = tuple(n for n in names if n in self.loops)
        if mode == "full" and (not split or _transformed(data) or tracing_mode_active()):
            SUMMARY.full_outputs += 1
            if split:
                data = self._gathered(NamedTensor._wrap(data, names), split)._data
            return NamedTensor._wrap(data, names) if names else data
        places = _placements(self.plan, names, data.dim() - len(names))
        shape = list(data.shape)
        for i, n in enumerate(names):
            shape[i] *= self.loops.get(n, 1)
        data = FromLocal.apply(data, self.dm, tuple(places), tuple(shape))
        if mode == "full":
            SUMMARY.full_outputs += 1
            data = data.full_tensor()   # (all-gather / all-reduce as the placements need)
        elif mode == "sharded":
            SUMMARY.sharded_outputs += 1
        return NamedTensor._wrap(data, names) if names else data

    def _same_dims(self, names: tuple) -> frozenset:
        """The mesh dims a value with ``names`` is the same along (an axis made whole for
        an op, :meth:`whole`, splits none)."""
        key = (names, self._whole)
        same = self._same.get(key)
        if same is None:
            split = {d for n in names if n not in self._whole
                     for d in self.mesh_dims.get(n, ())}
            same = self._same[key] = frozenset(range(self.dm.ndim)) - split
        return same

    def _layout(self, names: tuple) -> tuple:
        """A full input named ``names`` on this rank (:class:`FullInputs`): ``(cuts,
        gathers)`` -- ``(dim, start, size)`` of its chunk and ``(dim, groups)`` of each
        split axis."""
        gathers = tuple((i, mesh_groups(self.dm, self.mesh_dims[n]))
                        for i, n in enumerate(names) if n in self.loops)
        return self._cuts(names), gathers

    def broadcast(self, data: Any, names: tuple, result: tuple) -> Any:
        """``data`` (named ``names``) as an operand of an op whose values carry ``result``:
        where those split mesh dims it is replicated on, its cotangent's parts are summed
        there -- through an input's part view (:mod:`._dtensor_comms`) when every such use
        splits the same dims, else behind one :class:`Varying` per value and dims."""
        if not isinstance(data, torch.Tensor) or not may_need_grad(data):
            return data
        dims = self._same_dims(names) - self._same_dims(result)
        if not dims:
            return data
        seen = self._varying.get(id(data))
        if seen is not None and seen[0] is data and dims <= seen[1]:
            return data   # already handed to split uses (an op the dispatcher saw first)
        hit = self._parts.get(id(data))
        if hit is not None and hit[0] is data:
            value, part, (_, parts) = hit
            if not parts:
                parts.update(dims)
            if parts == dims:
                self._varying[id(part)] = (part, dims)
                return part
        key = (id(data), dims)
        hit = self._broadcasts.get(key)
        if hit is not None and hit[0] is data:
            return hit[1]
        out = Varying.apply(data, mesh_groups(self.dm, tuple(sorted(dims))))
        self._broadcasts[key] = (data, out)
        self._varying[id(out)] = (out, dims)
        return out

    # -- the collectives -----------------------------------------------------------------
    def _mean(self, total: Any, count: int) -> Any:
        return rewrap(total, getattr(total, "_data", total) / count)

    def _combine(self, op: str, axis_name: Any, names: tuple, operands: tuple,
                 carried: list, partial: Any) -> Any:
        """The collective over every rank, from this rank's ``partial`` over the
        ``carried`` split axes: an all-reduce over the mesh dims that split them."""
        self._check_one_axis_per_mesh_dim(op, operands)
        groups = self._groups(carried)
        data = getattr(partial, "_data", partial)
        if op in ("psum", "pdot"):
            return rewrap(partial, SumOverRanks.apply(data, groups))
        return rewrap(partial, self._extreme(op, operands[0], partial, data, groups))

    def _groups(self, names) -> list:
        """The groups to reduce over: the mesh dims splitting any of ``names``, in order."""
        dims = sorted({d for n in names for d in self.mesh_dims.get(n, ())})
        return mesh_groups(self.dm, tuple(dims))

    def sum_pieces(self, local: Callable, names: tuple, operands: tuple) -> Any:
        """An einsum's result summed over the ranks, each rank contracting its chunk of
        the split axes ``names`` (``local()``): the product never holds those axes."""
        carried = [n for n in self.names if n in names and n not in self._whole]
        return self._combine("psum", names, names, operands, carried, local())

    def _extreme(self, op: str, x: NamedTensor, partial: Any, data: torch.Tensor,
                 groups: list) -> torch.Tensor:
        kind = "max" if op == "pmax" else "min"
        out = extreme(data, kind, groups)
        if not (torch.is_grad_enabled() and data.requires_grad) and not functorch_active():
            return out
        # the entries of x attaining the extreme, here and on all ranks (amax shares the
        # cotangent evenly among them; this rank's partial extreme already shares its part)
        here = _attaining(x, rewrap(partial, out.detach())).to(out.dtype)
        total = all_reduce(here, groups, "sum")
        share = here / total   # 0/0 where a NaN won: a NaN gradient, as amax's
        return ExtremeOverRanks.apply(data, out, (share, groups))

    def count_over_ranks(self, count: torch.Tensor, names: tuple) -> torch.Tensor:
        """``count`` (a SerialLoop chunk's entries attaining its ``pmax``/``pmin`` over
        ``names``) summed over the ranks of the mesh dims splitting those axes."""
        groups = self._groups(names)
        return all_reduce(count, groups, "sum") if groups else count

    def _check_one_axis_per_mesh_dim(self, op: str, operands: tuple) -> None:
        """Two split axes on one mesh dim in what a collective combines (an einsum's
        intermediate, or pdot's two operands, may hold both): each rank holds one block of
        their diagonal only, so a reduction over either would miss the other blocks or
        add entries of different indices."""
        seen: dict = {}
        for n in {n for v in operands for n in _names_of(v) if n not in self._whole}:
            for d in self.mesh_dims.get(n, ()):
                if seen.setdefault(d, n) != n:
                    raise AxisResourceError(
                        f"{op}: named axes {seen[d]!r} and {n!r} are both split over mesh "
                        f"dim {d} in what it combines, so each rank holds only the diagonal "
                        f"block of the two; map them to different mesh axes")

    def _check_not_differentiated(self, op: str, carried: list) -> None:
        """Nothing to refuse: a derivative or vmap taken within the body goes through this
        path's Functions, which have transpose, forward-mode and vmap rules (no replay)."""

    def _moving(self, op: str, x: NamedTensor, axis_name: Any, split: tuple, options: dict):
        """A collective moving values along the split axes ``split``: computed on their
        whole, as if unsplit, and this rank's chunk kept."""
        self._check_one_axis_per_mesh_dim(op, (x,))
        if op == "psum_scatter" and split == _as_tuple(axis_name):
            out = self._scatter_sum(x, split, **options)
            if out is not None:
                return out
        out = self._default(op, (self._gathered(x, split), axis_name), options, split)
        return self._own_chunk(out, split)

    def _scatter_sum(self, x: NamedTensor, names: tuple, scatter_dimension: int,
                     tiled: bool) -> Any:
        """``psum_scatter`` over one split axis without making it whole: the sum over this
        rank's chunk, then a reduce-scatter (None where the sizes are wrong: the general
        path raises the collective's own error)."""
        name = names[0]
        if len(names) != 1 or name not in x._names:
            return None
        data, k = x._data, len(x._names)
        d = scatter_dimension + (data.dim() - k if scatter_dimension < 0 else 0)
        n = self.sizes[name]
        if not 0 <= d < data.dim() - k or data.shape[k + d] % n or (
                not tiled and data.shape[k + d] != n):
            return None
        at = k - 1 + d   # the scatter dim once the axis is summed away
        part = data.sum(x._names.index(name))
        mine = ScatterSumOverRanks.apply(part, at, mesh_groups(self.dm, self.mesh_dims[name]))
        mine = mine.unflatten(at, (self.chunk_size(name), -1))
        if not tiled:
            mine = mine.squeeze(at + 1)
        rest = tuple(m for m in x._names if m != name)
        return NamedTensor._wrap(mine.movedim(at, 0), (name,) + rest)

    def _gathered(self, x: Any, names: tuple) -> Any:
        """``x`` with each of the split axes ``names`` it carries gathered whole."""
        if not isinstance(x, NamedTensor):
            return x
        data = x._data
        for n in (n for n in names if n in x._names):
            groups = mesh_groups(self.dm, self.mesh_dims[n])
            # laid out as ``x`` is: a random op fills memory in order
            data = _in_memory_order(data, lambda t, d: GatherOverRanks.apply(t, d, groups),
                                    x._names.index(n))
        return NamedTensor._wrap(data, x._names)

    def _own_chunk(self, x: Any, names: tuple) -> Any:
        """``x``, holding the split axes ``names`` whole, cut to this rank's chunk of each."""
        if not isinstance(x, NamedTensor):
            return x   # (no named axis left: the same on every rank)
        data = x._data
        for n in (n for n in names if n in x._names):
            i = x._names.index(n)
            if data.shape[i] != self.sizes[n]:
                raise AxisResourceError(
                    f"a collective's result along {n!r} has size {data.shape[i]}, not the "
                    f"axis size {self.sizes[n]}: it cannot be cut into the ranks' chunks")
            data = ChunkOfWhole.apply(data, i, mesh_groups(self.dm, self.mesh_dims[n]))
        return NamedTensor._wrap(data, x._names)

    def whole(self, func: Callable, args: tuple, kwargs: dict, names: tuple,
              run: Callable = None) -> Any:
        """``func`` along the split axes ``names`` (``x.sum('batch')``, ``x.cumsum('i')``):
        run on their whole (:meth:`_gathered`) by ``run(func, args, kwargs)`` (default:
        the dispatcher), this rank's chunk kept of the result."""
        if is_inplace(func):
            raise AxisResourceError(
                f"{op_name(func)}: an in-place op along the axes {names}, which are split "
                f"over the mesh; compute it out of place (x = x.op(...))")
        is_nt = lambda v: isinstance(v, NamedTensor)   # noqa: E731
        args, kwargs = tree_map(lambda v: self._gathered(v, names), (args, kwargs),
                                is_leaf=is_nt)
        self._whole += names
        try:
            with suspended():   # the caller's dispatch notes the op as it was asked
                out = (run or dispatch)(func, args, kwargs)
        finally:
            self._whole = self._whole[:-len(names)]
        return tree_map(lambda v: self._own_chunk(v, names), out, is_leaf=is_nt)

    def check_named_op(self, op: str, names: tuple) -> None:
        split = tuple(n for n in names if self.splits(n))
        if split:
            raise NeedsWholeAxes(self, split)

    def check_contraction(self, held: tuple, contracted: tuple) -> None:
        """The contracted split axes sharing a mesh dim with another split axis held
        (``{'c': 'x', 'd': 'x'}`` in ``einsum('{c},n{d},{c}->n{c}')``): each rank holds
        only the diagonal block of the two, so they are summed on their whole."""
        dims = lambda n: set(self.mesh_dims[n]) if self.splits(n) else set()   # noqa: E731
        clash = tuple(n for n in contracted if any(
            dims(n) & dims(m) for m in held if m != n))
        if clash:
            raise NeedsWholeAxes(self, clash)

    def _reducing(self, op: str, *args, **kwargs):
        if op == "pdot":   # the operands may hold two split axes of one mesh dim
            x, y = args[0], args[1]
            names = _as_tuple(args[2])
            held = tuple(set(_names_of(x)) | set(_names_of(y)))
            try:
                self.check_contraction(held, tuple(n for n in names if n in held))
            except NeedsWholeAxes as e:
                from .. import lax

                return self.whole(lax.pdot, args, kwargs, e.names, run=call)
            # its chunk-local product runs where no engine is bound: hand the operands now
            every = tuple(_names_of(x)) + tuple(n for n in _names_of(y) if n not in _names_of(x))
            args = tuple(self._handed(v, every) for v in args[:2]) + tuple(args[2:])
        return super()._reducing(op, *args, **kwargs)

    def seed_size(self, name, local: int) -> int:
        """A loss lacking the split axis ``name`` is the same on its ranks: a seed stands
        for the instances of all of them (its cotangent is the whole on each)."""
        return local * self.loops[name] if self.splits(name) else local

    def first_copy(self, data: Any, dim: int, name) -> Any:
        """The first of equal copies along ``name``: this rank's first, the cotangent
        only where it is the axis's first index (summed over the ranks, it is the whole
        once)."""
        if not self.splits(name):
            return data.select(dim, 0)
        return FirstCopy.apply(data, dim, self._chunk[self.names.index(name)] == 0)

    def _handed(self, v: Any, every: tuple) -> Any:
        """:meth:`broadcast` on a NamedTensor or tensor operand ``v``."""
        if isinstance(v, NamedTensor):
            return NamedTensor._wrap(self.broadcast(v._data, v._names, every), v._names)
        return self.broadcast(v, (), every)
