"""The local-shard path's communication, as autograd Functions (see :mod:`._dtensor_spmd`):
each linear, so its forward-mode rule is the same Function applied to the tangent
(differentiable in turn: a gradient of a ``jvp`` taken in the body reaches the inputs),
and its vmap rule the same Function applied to the whole batch (``jacrev``'s vmapped
backward, a ``vmap`` opened in the body).

Each collective is an all-reduce over the mesh dims that split the axes it reduces,
issued with functional collectives (what DTensor issues: ``CommDebugMode`` counts them).
Each transpose reads the marks of :mod:`._uniform`: a cotangent known to be the same on
every rank of the dims summed over is multiplied by their ranks, not all-reduced.

>>> import torch
>>> class FourRanks:   # a stand-in mesh: a marked cotangent needs no communication
...     def size(self, dim): return 4
>>> dm = FourRanks()
>>> sum_of_cotangents(mark_uniform(torch.ones(2), dm, frozenset({0})), mesh_groups(dm, (0,)))
tensor([4., 4.])
"""
from __future__ import annotations

import torch

from ._uniform import mark_uniform, uniform_dims

__all__ = ["DivideByCount", "ExtremeOverRanks", "GatherOverRanks", "ScatterSumOverRanks",
           "SumBeforeBroadcast", "SumOverRanks", "all_reduce", "extreme", "gather", "mesh_groups",
           "ranks", "sum_of_cotangents", "uniform_part"]


def mesh_groups(dm, dims: tuple) -> list:
    """The groups to all-reduce over, one per mesh dim: ``(DeviceMesh, dim)``."""
    return [(dm, d) for d in dims]


def _leading(x: torch.Tensor, dim, info) -> torch.Tensor:
    """``x`` under ``vmap`` with its batch dim first (broadcast where it has none): the
    Functions' vmap rules apply the collective to the whole batch at once."""
    if dim is None:
        return x.unsqueeze(0).expand((info.batch_size,) + tuple(x.shape))
    return x.movedim(dim, 0)


def all_reduce(x: torch.Tensor, groups: list, op: str) -> torch.Tensor:
    """``x`` reduced (``op``: 'sum', 'max', 'min') over the ranks of every group in turn,
    with functional collectives (what DTensor issues: CommDebugMode counts them)."""
    from .._torch_private import functional_all_reduce

    if x.dtype == torch.bool:
        return all_reduce(x.to(torch.uint8), groups, op).to(torch.bool)
    out = x.detach().contiguous()
    buf = torch.view_as_real(out) if out.is_complex() else out
    for g in groups:
        buf = functional_all_reduce(buf, op, g)
    return torch.view_as_complex(buf) if out.is_complex() else buf


def ranks(dm, dims) -> int:
    """How many ranks the mesh dims ``dims`` of ``dm`` hold together."""
    out = 1
    for d in dims:
        out *= dm.size(d)
    return out


def uniform_part(g: torch.Tensor, dims, dm) -> tuple:
    """A partial sum ``g`` over the mesh ``dims`` -> (``g`` summed over those of them it
    is marked the same along -- ``g`` times their ranks, no communication --, the dims
    still to sum over)."""
    same = uniform_dims(g, dm)
    done = ranks(dm, [d for d in dims if d in same])
    return (g * done if done != 1 else g), tuple(d for d in dims if d not in same)


def sum_of_cotangents(g: torch.Tensor, groups: list) -> torch.Tensor:
    """``g`` summed over the ranks of ``groups``: times their number along the mesh dims
    where ``g`` is marked the same on all of them, an all-reduce along the others."""
    dm = groups[0][0]
    uniform = uniform_dims(g, dm)
    g, rest = uniform_part(g, [d for _, d in groups], dm)
    if rest:
        return SumOverRanks.apply(g, mesh_groups(dm, rest))
    return mark_uniform(g, dm, uniform)


class SumOverRanks(torch.autograd.Function):
    """``psum`` across ranks: an all-reduce; its transpose is the same all-reduce (or
    less: :func:`sum_of_cotangents`)."""

    @staticmethod
    def forward(x, groups):
        return all_reduce(x, groups, "sum")

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.groups = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return sum_of_cotangents(g, ctx.groups), None

    @staticmethod
    def jvp(ctx, t, _):
        return SumOverRanks.apply(t, ctx.groups)

    @staticmethod
    def vmap(info, in_dims, x, groups):
        return SumOverRanks.apply(x, groups), in_dims[0]


class DivideByCount(torch.autograd.Function):
    """``pmean``'s division of the ``psum`` by the instance count; the cotangent keeps
    its mark."""

    @staticmethod
    def forward(x, count, dm):
        return x / count

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.count, ctx.dm = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, g):
        return mark_uniform(g / ctx.count, ctx.dm, uniform_dims(g, ctx.dm)), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return DivideByCount.apply(t, ctx.count, ctx.dm)

    @staticmethod
    def vmap(info, in_dims, x, count, dm):
        return DivideByCount.apply(x, count, dm), in_dims[0]


class ExtremeOverRanks(torch.autograd.Function):
    """``pmax``/``pmin`` of the ranks' partial extremes; the cotangent (summed over the
    ranks, as the output is replicated) goes to each rank in proportion to how many of
    the entries attaining the extreme it holds (``share``)."""

    @staticmethod
    def forward(x, out, share):
        return out.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.share, ctx.groups = inputs[2]

    @staticmethod
    def backward(ctx, g):
        return sum_of_cotangents(g, ctx.groups) * ctx.share, None, None

    @staticmethod
    def jvp(ctx, t, *_):   # each rank's partial tangent, in its share
        return SumOverRanks.apply(t * ctx.share, ctx.groups)

    @staticmethod
    def vmap(info, in_dims, x, out, share):
        x, out = _leading(x, in_dims[0], info), _leading(out, in_dims[1], info)
        d = in_dims[2][0] if isinstance(in_dims[2], tuple) else None
        return ExtremeOverRanks.apply(x, out, (_leading(share[0], d, info), share[1])), 0


def extreme(x: torch.Tensor, kind: str, groups: list) -> torch.Tensor:
    """The max (min) over ranks of ``x``, NaN wherever some rank holds a NaN (as ``amax``)."""
    if not x.is_floating_point():
        return all_reduce(x, groups, kind)
    nan = torch.isnan(x)
    fill = float("-inf") if kind == "max" else float("inf")
    flag = nan.to(x.dtype) if kind == "max" else -nan.to(x.dtype)
    both = all_reduce(torch.stack([x.masked_fill(nan, fill), flag]), groups, kind)
    return both[0].masked_fill(both[1] != 0, float("nan"))


class SumBeforeBroadcast(torch.autograd.Function):
    """A replicated value, as it is, on its way into an einsum that broadcasts it along
    axes split over the mesh ``dims``; backward: its cotangent, a different share on each
    of those ranks, summed over them (Megatron's "f") and split evenly again, marked the
    same on all -- when ``switch[0]`` (set by :meth:`._uniform.Replication.finish`), else
    handed on as it is."""

    @staticmethod
    def forward(x, dm, dims, switch):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm, ctx.dims, ctx.switch = inputs[1:]

    @staticmethod
    def backward(ctx, g):
        dm, dims = ctx.dm, ctx.dims
        same = uniform_dims(g, dm)
        if not ctx.switch[0] or dims <= same:
            return g, None, None, None
        total = sum_of_cotangents(g, mesh_groups(dm, tuple(sorted(dims))))
        return mark_uniform(total / ranks(dm, dims), dm, same | dims), None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return t.view_as(t)

    @staticmethod
    def vmap(info, in_dims, x, dm, dims, switch):
        return SumBeforeBroadcast.apply(x, dm, dims, switch), in_dims[0]




def _on_wire(x: torch.Tensor, move) -> torch.Tensor:
    """``move(buffer)`` on a buffer the collectives carry (bool as bytes, complex as pairs
    of reals: a trailing dim, so the dims moved keep their index)."""
    if x.dtype == torch.bool:
        return move(x.to(torch.uint8)).to(torch.bool)
    if x.is_complex():
        return torch.view_as_complex(move(torch.view_as_real(x.contiguous())).contiguous())
    return move(x.contiguous())


class _AlongDim(torch.autograd.Function):
    """A collective along ``dim`` of ``x`` over ``groups`` (``apply(x, dim, groups)``),
    linear: its forward-mode rule is itself on the tangent, its vmap rule itself on the
    batch (moved first, ``dim`` one further)."""

    @classmethod
    def jvp(cls, ctx, t, *_):
        return cls.apply(t, ctx.dim, ctx.groups)

    @classmethod
    def vmap(cls, info, in_dims, x, dim, groups):
        return cls.apply(_leading(x, in_dims[0], info), dim + 1, groups), 0


def gather(x: torch.Tensor, dim: int, groups: list) -> torch.Tensor:
    """``x`` of every rank of ``groups`` concatenated along ``dim``: block ``c`` is rank
    ``c``'s, ``c`` counted over the mesh dims in order (the first the slowest), as a
    split axis's chunks are."""
    from .._torch_private import functional_all_gather

    for g in reversed(groups):
        x = _on_wire(x, lambda b: functional_all_gather(b, dim, g))
    return x


class GatherOverRanks(_AlongDim):
    """A split axis made whole: :func:`gather` along ``dim``, the same on every rank of
    ``groups``; the transpose sums the cotangent's shares over those ranks, each keeping
    its own block (a reduce-scatter; no communication where the cotangent is marked the
    same on all of them)."""

    @staticmethod
    def forward(x, dim, groups):
        return gather(x.detach(), dim, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim, ctx.groups, ctx.size = inputs[1], inputs[2], inputs[0].shape[inputs[1]]

    @staticmethod
    def backward(ctx, g):
        dm, dims = ctx.groups[0][0], [d for _, d in ctx.groups]
        if set(dims) <= uniform_dims(g, dm):   # every share is the whole: take our block
            here, count = 0, 1
            for d in dims:
                here, count = here * dm.size(d) + dm.get_coordinate()[d], count * dm.size(d)
            return g.narrow(ctx.dim, here * ctx.size, ctx.size) * count, None, None
        return ScatterSumOverRanks.apply(g, ctx.dim, ctx.groups), None, None


class ScatterSumOverRanks(_AlongDim):
    """:class:`GatherOverRanks`'s transpose: ``x`` summed over the ranks of ``groups``,
    each keeping its own block along ``dim``; its own transpose is the gather."""

    @staticmethod
    def forward(x, dim, groups):
        from .._torch_private import functional_reduce_scatter

        for grp in groups:
            x = _on_wire(x.detach(), lambda b: functional_reduce_scatter(b, dim, grp))
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim, ctx.groups = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, g):
        return GatherOverRanks.apply(g, ctx.dim, ctx.groups), None, None
