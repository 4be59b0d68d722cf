"""The DTensor engine's own communication: one ``DeviceMesh`` per mesh, the placements
of a plan, the gradient reductions to the inputs' layouts, and :data:`SUMMARY`, the count
of what the engine moved beyond the program's collectives (``nx.parallel.comm_summary()``).

Both halves of the engine use these (:mod:`._dtensor`, the inputs and outputs that go
through DTensors, and :mod:`._dtensor_spmd`, the body on each rank's local shards), so
they sit below both.
``torch.distributed`` is imported when first used.

>>> from named_axes.parallel._dtensor_comms import SUMMARY
>>> sorted(SUMMARY.as_dict())[:2]
['calls', 'distributed_inputs']
"""
from __future__ import annotations

from typing import Any

import torch

from .._errors import AxisResourceError
from .._torch_private import tracing_mode_active
from ._local_comms import SumOverRanks
from ._stall import bounded, over

__all__ = ["device_mesh", "CommSummary", "SUMMARY", "placements", "reduce_to", "sum_partials"]


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
    if shared is not None:   # equal meshes share one DeviceMesh (and its groups)
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
    # The group that checks the ranks agree on each call (collective: all ranks build it).
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
            (:mod:`._dtensor_spmd`).
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


def _partial_dims(have, want) -> tuple | None:
    """The mesh dims where ``have`` is a partial sum and ``want`` replicated, if that is the
    only difference (an all-reduce over those dims turns one into the other); else None."""
    dims = []
    for k, (a, b) in enumerate(zip(have, want)):
        if a == b:
            continue
        if a.is_partial() and getattr(a, "reduce_op", "sum") == "sum" and b.is_replicate():
            dims.append(k)
        else:
            return None
    return tuple(dims)


def reduce_to(gs, targets, dm) -> list:
    """Gradients (DTensors) -> the given placements.  The partial sums that only need an
    all-reduce share one flat buffer per dtype and one all-reduce per mesh dim (the
    buffer is ordered so that each mesh dim's part is one contiguous slice); the rest
    redistribute.  Nothing is all-gathered that the target keeps sharded."""
    from torch.distributed.tensor import DTensor

    out = list(gs)
    groups: dict = {}
    for i, (g, t) in enumerate(zip(gs, targets)):
        if g is None or type(g).__name__ != "DTensor" or tuple(g.placements) == tuple(t):
            continue
        dims = _partial_dims(g.placements, t)
        if dims is None:
            out[i] = g.redistribute(dm, t)
            SUMMARY.gradient_reductions += 1
        else:
            groups.setdefault(g.dtype, []).append((dims, i))
    for members in groups.values():
        summed = sum_partials([gs[i].to_local() for _, i in members],
                              [dims for dims, _ in members], dm)
        for (_, i), t in zip(members, summed):
            out[i] = DTensor.from_local(t, dm, targets[i], run_check=False,
                                        shape=gs[i].shape, stride=gs[i].stride())
    return out


def sum_partials(local: list, dims: list, dm, differentiable: bool = False) -> list:
    """Local tensors of one dtype, each a partial sum over the mesh dims ``dims[i]`` ->
    summed there: one flat buffer, one all-reduce per mesh dim (ordered (0,), (0, 1),
    (1,), ...: on a 2-D mesh each mesh dim's members are one contiguous run of it).
    In place (counted as ``gradient_reductions``), or ``differentiable``: through the
    local-shard path's all-reduce Function, for a backward that may be differentiated
    -- and in a trace (nx.jit's programs hold functional collectives only)."""
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
