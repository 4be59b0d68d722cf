"""The DTensor engine's own communication and edges (:mod:`._dtensor`): one
``DeviceMesh`` per mesh, a plan's placements, :data:`SUMMARY` (``nx.parallel.comm_summary()``),
and the inputs onto each rank's shards and the outputs back, as autograd Functions.

Uses that broadcast a replicated input into values split over mesh dims each hand its
cotangent a part to be summed over those ranks.  Rather than an all-reduce per use, each
input comes in two views: the value, for uses that keep it replicated, and a *part* view
(:meth:`._dtensor.DTensorEngine.broadcast`) whose cotangents the edge's backward sums --
one flat all-reduce for all inputs of a dtype (:func:`sum_partials`, as DDP buckets).

>>> sorted(SUMMARY.as_dict())[:2]
['calls', 'distributed_inputs']
>>> rewrap(3, torch.ones(1))   # a leaf without names stays a plain tensor
tensor([1.])
"""
from __future__ import annotations

from typing import Any

import torch

from .._errors import AxisResourceError
from .._tensor import NamedTensor
from .._torch_private import tracing_mode_active
from ._local_comms import GatherOverRanks, SumOverRanks, _leading
from ._rank_check import bounded, over

__all__ = ["device_mesh", "CommSummary", "SUMMARY", "placements", "sum_partials", "FromLocal",
           "FullInputs", "ShardsOf", "rewrap"]


def device_mesh(m) -> Any:
    """The ``DeviceMesh`` of a :class:`Mesh` (built once, on first use, on every rank)."""
    dm = m._cache.get("device_mesh")
    if dm is None:
        from .._torch_private import disable_dispatch_modes

        with disable_dispatch_modes():   # first used inside nx.jit's trace: on values
            dm = _build_device_mesh(m)
    return dm


def _build_device_mesh(m) -> Any:
    """The ``DeviceMesh`` of ``m``, shared by equal meshes (their groups too)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    key = (m.platform, tuple(m.axis_names), m.device_ids.tobytes(), m.device_ids.shape)
    shared = _DEVICE_MESHES.get(key)
    if shared is not None:
        m._cache["device_mesh"], m._cache["check_group"] = shared
        return shared[0]

    if not (dist.is_available() and dist.is_initialized()):
        raise AxisResourceError(
            f"{m!r} spans {m.size} devices, but torch.distributed is not initialized; "
            f"launch with `torchrun --nproc-per-node={m.size} ...` and call "
            f"torch.distributed.init_process_group() (or use backend='xla')")
    world = dist.get_world_size()
    ids = torch.as_tensor(m.device_ids.astype("int64"))
    if int(ids.max()) >= world:
        raise AxisResourceError(f"{m!r} names rank {int(ids.max())}, but the process group "
                                f"has {world} ranks")
    device_type = "cuda" if m.platform == "cuda" else "cpu"
    dm = DeviceMesh(device_type, ids, mesh_dim_names=tuple(str(a) for a in m.axis_names))
    m._cache["device_mesh"] = dm
    # the group of the ranks' input check (collective: all ranks build it)
    ranks = sorted(int(r) for r in ids.flatten())
    m._cache["check_group"] = (None if ranks == list(range(world))
                               else dist.new_group(ranks))
    _DEVICE_MESHES[key] = (dm, m._cache["check_group"])
    return dm


_DEVICE_MESHES: dict = {}


class CommSummary:
    """What the DTensor engine moved on its own account (beyond the program's collectives),
    accumulated over calls: ``nx.parallel.comm_summary()`` reads it, ``.reset()`` clears it.

    Attributes:
        calls: engine runs.
        input_checks: cross-rank input checks (one all-gather each; once per new input
            structure).
        distributed_inputs: full inputs split locally (no communication).
        sharded_inputs: DTensor inputs taken as they are (no communication).
        redistributed_inputs: DTensor inputs whose layout differed from the plan's, moved
            by ``redistribute``; ``redistributions`` lists ``(value, from, to)``.
        gradient_reductions: collectives that reduced sharded inputs' gradients to the
            inputs' layouts (one flat all-reduce per group of partial sums).
        full_outputs / sharded_outputs: outputs returned full / as DTensors.
        local_shard_runs: calls whose body ran on each rank's shards
            (:mod:`._dtensor`).
    """

    FIELDS = ("calls", "input_checks", "distributed_inputs", "sharded_inputs",
              "redistributed_inputs", "gradient_reductions", "full_outputs", "sharded_outputs",
              "local_shard_runs")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        for f in self.FIELDS:
            setattr(self, f, 0)
        self.redistributions: list = []

    def as_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.FIELDS}
        d["redistributions"] = list(self.redistributions)
        return d

    def __repr__(self) -> str:
        return f"CommSummary({self.as_dict()})"


SUMMARY = CommSummary()


def placements(plan, names: tuple, ndim: int) -> list:
    """The DTensor placements of a value named ``names`` with ``ndim`` positional dims
    under ``plan``: ``Shard(d)`` per physical dim split over a mesh dim, else ``Replicate()``."""
    from torch.distributed.tensor import Replicate, Shard

    return [Replicate() if d is None else Shard(d) for _, d in plan.placements(names, ndim)]


def sum_partials(local: list, dims: list, dm, differentiable: bool = False) -> list:
    """Local tensors of one dtype, each a partial sum over the mesh dims ``dims[i]`` ->
    summed there: one flat buffer, one all-reduce per mesh dim (ordered (0,), (0, 1),
    (1,), ...: on a 2-D mesh each mesh dim's members are one contiguous run of it).
    In place, or ``differentiable`` (and in a trace, whose programs hold functional
    collectives only) through :class:`SumOverRanks`."""
    import torch.distributed as dist

    differentiable = differentiable or tracing_mode_active()

    order = sorted(range(len(local)), key=lambda i: (min(dims[i]), len(dims[i]), i))
    flat = torch.cat([local[i].reshape(-1) for i in order])
    offsets = [0]
    for i in order:
        offsets.append(offsets[-1] + local[i].numel())
    for k in sorted({k for d in dims for k in d}):
        for lo, hi in _runs([k in dims[i] for i in order]):
            a, b = offsets[lo], offsets[hi]
            if differentiable and (a, b) == (0, flat.numel()):   # (no copy of the rest)
                flat = SumOverRanks.apply(flat, [(dm, k)])
            elif differentiable:
                flat = torch.cat([flat[:a], SumOverRanks.apply(flat[a:b], [(dm, k)]), flat[b:]])
            else:
                bounded(over("gradient all-reduce", (dm, k)), [(dm, k)],
                        lambda: dist.all_reduce(flat[a:b], group=dm.get_group(k)))
                SUMMARY.gradient_reductions += 1
    out = [None] * len(local)
    for i, a, b in zip(order, offsets, offsets[1:]):
        out[i] = flat[a:b].view(local[i].shape)
    return out


def _runs(flags: list) -> list:
    """``[(start, stop), ...]`` of the maximal runs of true ``flags``."""
    runs, start = [], None
    for j, f in enumerate(flags + [False]):
        if f and start is None:
            start = j
        elif not f and start is not None:
            runs.append((start, j))
            start = None
    return runs


def rewrap(leaf: Any, data: torch.Tensor) -> Any:
    """``data`` with ``leaf``'s names, if it has any."""
    return NamedTensor._wrap(data, leaf._names) if isinstance(leaf, NamedTensor) else data


def _views(xs) -> tuple:
    """Each of ``xs`` twice over: the values, then their part views (module docstring)."""
    return tuple(x.view_as(x) for x in xs) + tuple(x.view_as(x) for x in xs)


def _with_parts(gs: tuple, parts: list, differentiable: bool) -> list:
    """The whole cotangents ``gs[:k]`` plus the parts ``gs[k:]`` summed over the mesh
    dims in ``parts[i]`` (``(DeviceMesh, set of dims)``, filled by the forward's uses):
    one flat all-reduce per dtype."""
    k = len(gs) // 2
    out = list(gs[:k])
    by_dtype: dict = {}
    for i, (g, (dm, dims)) in enumerate(zip(gs[k:], parts)):
        if g is not None and dims:
            by_dtype.setdefault(g.dtype, []).append((i, g, tuple(sorted(dims))))
    for members in by_dtype.values():
        dm = parts[members[0][0]][0]
        summed = sum_partials([g for _, g, _ in members], [d for _, _, d in members], dm,
                              differentiable=differentiable)
        for (i, _, _), t in zip(members, summed):
            out[i] = t if out[i] is None else out[i] + t
    return out


def _chunks(xs, layouts) -> list:
    """Each of ``xs`` cut to this rank's chunk of its split axes (``layouts[i][0]``:
    ``(dim, start, size)`` per axis)."""
    out = []
    for x, (cuts, _) in zip(xs, layouts):
        for dim, start, size in cuts:
            x = x.narrow(dim, start, size)
        out.append(x)
    return out


class FullInputs(torch.autograd.Function):
    """Full inputs (the same on every rank) -> this rank's chunk of each (``layouts[i]``:
    ``(cuts, gathers)``) and its part view; backward, differentiably: the parts summed,
    each gradient gathered over the mesh dims of each split axis (``gathers``: ``(dim,
    groups)``), the full gradient on every rank.  Makes no DTensor, so ``nx.jit`` traces
    it.  ``apply(parts, layouts, *xs)``."""

    @staticmethod
    def forward(parts, layouts, *xs):
        return _views(_chunks(xs, layouts))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.parts, ctx.layouts = inputs[0], inputs[1]
        ctx.set_materialize_grads(False)   # an input the outputs ignore gets no gradient

    @staticmethod
    def backward(ctx, *gs):
        out = _with_parts(gs, ctx.parts, differentiable=True)
        for i, (_, gathers) in enumerate(ctx.layouts):
            for dim, groups in gathers:
                if out[i] is not None:
                    out[i] = GatherOverRanks.apply(out[i], dim, groups)
        return (None, None, *out)

    @staticmethod
    def jvp(ctx, _, __, *ts):
        return _views(_chunks(ts, ctx.layouts))

    @staticmethod
    def vmap(info, in_dims, parts, layouts, *xs):
        xs = [_leading(x, d, info) for x, d in zip(xs, in_dims[2:])]
        moved = tuple((tuple((d + 1, a, b) for d, a, b in cuts),
                       tuple((d + 1, g) for d, g in gathers)) for cuts, gathers in layouts)
        return FullInputs.apply(parts, moved, *xs), (0,) * (2 * len(xs))


class ShardsOf(torch.autograd.Function):
    """DTensors laid out as the plan wants -> their local shards and part views; backward:
    the parts summed, each gradient a DTensor laid out like its input (a sharded
    parameter's gradient stays sharded).  ``apply(dm, parts, *dtensors)``."""

    @staticmethod
    def forward(dm, parts, *xs):
        return _views([x.to_local() for x in xs])   # (grad is off in a forward: no node)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm, ctx.parts = inputs[0], inputs[1]
        ctx.specs = [(tuple(x.placements), x.shape, x.stride()) for x in inputs[2:]]
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, *gs):
        from torch.distributed.tensor import DTensor

        twice = torch.is_grad_enabled()   # create_graph: this backward is differentiated
        out = _with_parts(gs, ctx.parts, differentiable=twice)
        for i, (g, (places, shape, stride)) in enumerate(zip(out, ctx.specs)):
            if g is None:
                continue
            if twice:
                out[i] = FromLocal.apply(g, ctx.dm, places, tuple(shape))
            else:
                out[i] = DTensor.from_local(g.contiguous(), ctx.dm, places, run_check=False,
                                            shape=shape, stride=stride)
        return (None, None, *out)


class FromLocal(torch.autograd.Function):
    """This rank's shard of an output -> the DTensor laid out per the plan; backward: the
    cotangent's local shard (a partial sum is summed first)."""

    @staticmethod
    def forward(local, dm, places, shape):
        from torch.distributed.tensor import DTensor

        local = local.contiguous()
        stride = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            stride[i] = stride[i + 1] * shape[i + 1]
        return DTensor.from_local(local, dm, list(places), run_check=False,
                                  shape=torch.Size(shape), stride=tuple(stride))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm, ctx.places = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, g):
        from torch.distributed.tensor import DTensor, Replicate

        if not isinstance(g, DTensor):   # a full cotangent: the same on every rank
            g = DTensor.from_local(g, ctx.dm, [Replicate()] * ctx.dm.ndim, run_check=False)
        want = [p if p.is_shard() else Replicate() for p in ctx.places]
        if list(g.placements) != want:
            g = g.redistribute(ctx.dm, want)
        return g.to_local(), None, None, None
