"""The local-shard path's edges (:mod:`._dtensor_spmd`): inputs onto each rank's shards
and outputs back, as autograd Functions whose backward places the all-reduces a
replicated input's gradient needs (each rank holds a partial sum of it) and splits a
replicated output's cotangent over the ranks.

>>> rewrap(3, torch.ones(1))   # a leaf without names stays a plain tensor
tensor([1.])
"""
from __future__ import annotations

from typing import Any

import torch

from .._tensor import NamedTensor
from .._torch_private import local_tensor
from ._dtensor_comms import sum_partials
from ._local_comms import GatherOverRanks, mesh_groups, sum_of_cotangents, uniform_part
from ._uniform import mark_uniform

__all__ = ["ChunkOfFull", "FromLocal", "ReplicatedOutput", "ShardsOf", "SumGradsOverRanks", "local_shard",
           "rewrap"]


def local_shard(leaf: Any) -> Any:
    """A NamedTensor over a DTensor -> over its local shard; the gradient handed back is a
    partial sum over the mesh dims the value is replicated on (module docstring)."""
    data = leaf._data if isinstance(leaf, NamedTensor) else leaf
    if type(data).__name__ != "DTensor":
        return leaf
    from torch.distributed.tensor import Partial

    grads = [Partial() if p.is_replicate() else p for p in data.placements]
    local = data.to_local(grad_placements=grads)
    return NamedTensor._wrap(local, leaf._names) if isinstance(leaf, NamedTensor) else local


def rewrap(leaf: Any, data: torch.Tensor) -> Any:
    """``data`` with ``leaf``'s names, if it has any."""
    return NamedTensor._wrap(data, leaf._names) if isinstance(leaf, NamedTensor) else data


class ShardsOf(torch.autograd.Function):
    """DTensors laid out as the plan wants -> their local shards; backward: each local
    gradient, a partial sum over the mesh dims its input is replicated on, summed there
    (one flat buffer per dtype, :func:`._dtensor_comms.sum_partials`) and handed back as a
    DTensor laid out like its input -- a sharded parameter's gradient stays sharded."""

    @staticmethod
    def forward(dm, *xs):
        return tuple(local_tensor(x).view_as(local_tensor(x)) for x in xs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm = inputs[0]
        ctx.specs = [(tuple(x.placements), x.shape, x.stride()) for x in inputs[1:]]
        ctx.set_materialize_grads(False)   # an input the outputs ignore gets no gradient

    @staticmethod
    def backward(ctx, *gs):
        from torch.distributed.tensor import DTensor


        out = [None] * len(gs)
        by_dtype: dict = {}
        for i, (g, (places, _, _)) in enumerate(zip(gs, ctx.specs)):
            if g is None:
                continue
            g, dims = uniform_part(g, [d for d, p in enumerate(places) if p.is_replicate()],
                                      ctx.dm)
            out[i] = g
            if dims:
                by_dtype.setdefault(g.dtype, []).append((i, dims))
        twice = torch.is_grad_enabled()   # create_graph: this backward is differentiated
        for members in by_dtype.values():
            summed = sum_partials([out[i] for i, _ in members], [d for _, d in members], ctx.dm,
                                  differentiable=twice)
            for (i, _), t in zip(members, summed):
                out[i] = t
        for i, (g, (places, shape, stride)) in enumerate(zip(out, ctx.specs)):
            if g is None:
                continue
            if twice:   # an output edge: its cotangent is the same on every rank it is on
                out[i] = FromLocal.apply(g, ctx.dm, tuple(places), tuple(shape))
            else:
                out[i] = DTensor.from_local(g.contiguous(), ctx.dm, places, run_check=False,
                                            shape=shape, stride=stride)
        return (None, *out)


class ChunkOfFull(torch.autograd.Function):
    """A full input -> this rank's chunk of each split axis (``cuts``: ``(dim, start,
    size)`` per axis); backward: the chunk's gradient, a partial sum over the mesh dims
    ``rep`` the input is replicated on, summed there, then gathered over the mesh dims
    of each split axis (``gathers``: ``(dim, groups)``) -- the full gradient, the same on
    every rank.  Traceable: no DTensor is made (``nx.jit`` of a mesh call)."""

    @staticmethod
    def forward(x, dm, cuts, rep, gathers):
        for dim, start, size in cuts:
            x = x.narrow(dim, start, size)
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm, _, ctx.rep, ctx.gathers = inputs[1:]

    @staticmethod
    def backward(ctx, g):
        if ctx.rep:
            g = sum_of_cotangents(g, mesh_groups(ctx.dm, ctx.rep))
        for dim, groups in ctx.gathers:
            g = GatherOverRanks.apply(g, dim, groups)
        if torch.is_grad_enabled():   # create_graph: the gradient is a full output
            g = ReplicatedOutput.apply(g, ctx.dm)
        return g, None, None, None, None


class SumGradsOverRanks(torch.autograd.Function):
    """Replicated full inputs, as they are; backward: their gradients (each rank's
    partial sum) summed over every rank in one flat buffer per dtype -- differentiably
    (an outer derivative may differentiate this backward), and not along the mesh dims
    where a gradient is marked the same on every rank (:func:`._local_comms.uniform_part`)."""

    @staticmethod
    def forward(dm, *xs):
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm = inputs[0]
        ctx.set_materialize_grads(False)   # an input the outputs ignore gets no gradient

    @staticmethod
    def backward(ctx, *gs):

        out = list(gs)
        by_dtype: dict = {}
        for i, g in enumerate(gs):
            if g is not None:
                out[i], dims = uniform_part(g, range(ctx.dm.ndim), ctx.dm)
                if dims:
                    by_dtype.setdefault(g.dtype, []).append((i, dims))
        for members in by_dtype.values():
            summed = sum_partials([out[i] for i, _ in members], [d for _, d in members],
                                  ctx.dm, differentiable=True)
            for (i, _), t in zip(members, summed):
                out[i] = t
        if torch.is_grad_enabled():   # create_graph: the gradients are full outputs
            out = [None if t is None else ReplicatedOutput.apply(t, ctx.dm) for t in out]
        return (None, *out)

    @staticmethod
    def jvp(ctx, _, *ts):
        return tuple(t.view_as(t) for t in ts)

    @staticmethod
    def vmap(info, in_dims, dm, *xs):
        return SumGradsOverRanks.apply(dm, *xs), tuple(in_dims[1:])


class ReplicatedOutput(torch.autograd.Function):
    """A full output, the same on every rank, as it is; backward: the cotangent (the same
    on every rank) split evenly over the ranks, marked as the same on all of them."""

    @staticmethod
    def forward(x, dm):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm = inputs[1]

    @staticmethod
    def backward(ctx, g):
        dm = ctx.dm
        return mark_uniform(g / dm.size(), dm, frozenset(range(dm.ndim))), None

    @staticmethod
    def jvp(ctx, t, _):
        return t.view_as(t)

    @staticmethod
    def vmap(info, in_dims, x, dm):
        return ReplicatedOutput.apply(x, dm), in_dims[0]


class FromLocal(torch.autograd.Function):
    """This rank's shard of an output -> the DTensor laid out per the plan; backward: the
    cotangent's local part, split evenly over the ranks of each mesh dim the output is
    replicated on (a partial sum there is kept as it is)."""

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
        want, split = [], 1
        for d, (p, q) in enumerate(zip(ctx.places, g.placements)):
            if p.is_shard():
                want.append(p)
            elif q.is_partial():
                want.append(q)
            else:
                want.append(Replicate())
                split *= ctx.dm.size(d)
        if list(g.placements) != want:
            g = g.redistribute(ctx.dm, want)
        local = g.to_local()
        same = frozenset(d for d, p in enumerate(want) if p.is_replicate())
        return mark_uniform(local / split, ctx.dm, same), None, None, None
