"""The local-shard path's edges (:mod:`._dtensor_spmd`): inputs onto each rank's shards
and outputs back, as autograd Functions.

A replicated input's cotangent is whole on every rank (:mod:`._local_comms`), but the
uses that broadcast it into values split over mesh dims (a weight meeting a batch split
over the data-parallel dim) each hand it a part, which must be summed over those ranks.
Rather than an all-reduce per use, each input comes in two views: the value itself, for
uses that keep it replicated, and a *part* view (the engine hands it to such uses,
:meth:`._dtensor_spmd.LocalShardEngine.broadcast`) whose cotangents the edge's backward
sums over the mesh dims its uses split -- one flat all-reduce for all inputs of a dtype
(:func:`._dtensor_comms.sum_partials`, as DDP buckets).

>>> rewrap(3, torch.ones(1))   # a leaf without names stays a plain tensor
tensor([1.])
"""
from __future__ import annotations

from typing import Any

import torch

from .._tensor import NamedTensor
from ._dtensor_comms import sum_partials
from ._local_comms import GatherOverRanks, _leading

__all__ = ["FromLocal", "FullInputs", "ShardsOf", "local_shard", "rewrap"]


def local_shard(leaf: Any) -> Any:
    """A NamedTensor over a DTensor -> over its local shard (the gradient handed back is
    laid out as the DTensor: whole where it is replicated)."""
    data = leaf._data if isinstance(leaf, NamedTensor) else leaf
    if type(data).__name__ != "DTensor":
        return leaf
    local = data.to_local()
    return NamedTensor._wrap(local, leaf._names) if isinstance(leaf, NamedTensor) else local


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
    ``(cuts, gathers)``, no cut for a replicated input) and its part view (module
    docstring); backward: each chunk's whole gradient, the parts summed over the ranks
    (one flat all-reduce per dtype), gathered over the mesh dims of each split axis
    (``gathers``: ``(dim, groups)``) -- the full gradient, the same on every rank;
    differentiably (an outer derivative may differentiate this backward).  Traceable: no
    DTensor is made (``nx.jit`` of a mesh call).  ``apply(parts, layouts, *xs)``."""

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
    """DTensors laid out as the plan wants -> their local shards and part views (module
    docstring); backward: each local gradient, the parts summed, handed back as a
    DTensor laid out like its input -- a sharded parameter's gradient stays sharded.
    ``apply(dm, parts, *dtensors)``."""

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
