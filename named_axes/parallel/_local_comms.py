"""The local-shard path's communication, as autograd Functions (see :mod:`._dtensor`).

Each is linear: its forward-mode rule is itself on the tangent, its vmap rule itself on the
whole batch, and -- the cotangent being whole on every rank where the named shape says the
value is replicated (``shard_map``'s rule) -- its backward is its partner's forward (its
``transpose``: ``psum`` and :class:`Varying`, the gather and the chunk).  Communication goes
through functional collectives, as DTensor's does.

>>> import torch
>>> ChunkOfWhole.apply(torch.arange(4.), 0, [])   # no mesh dim: the whole is the chunk
tensor([0., 1., 2., 3.])
"""
from __future__ import annotations

import torch

from ._rank_check import bounded, over

__all__ = ["ChunkOfWhole", "ExtremeOverRanks", "FirstCopy", "GatherOverRanks",
           "ScatterSumOverRanks", "SumOverRanks", "Varying", "all_reduce", "extreme", "gather",
           "mesh_groups", "own_block"]


def mesh_groups(dm, dims: tuple) -> list:
    """The groups to all-reduce over, one per mesh dim: ``(DeviceMesh, dim)``."""
    return [(dm, d) for d in dims]


def _leading(x: torch.Tensor, dim, info) -> torch.Tensor:
    """``x`` under ``vmap`` with its batch dim first (broadcast where it has none): the
    Functions' vmap rules apply the collective to the whole batch at once."""
    if dim is None:
        return x.unsqueeze(0).expand((info.batch_size,) + tuple(x.shape))
    return x.movedim(dim, 0)


def _on_wire(x: torch.Tensor, move) -> torch.Tensor:
    """``move(buffer)`` on a buffer the collectives carry (bool as bytes, complex as pairs
    of reals: a trailing dim, so the dims moved keep their index)."""
    if x.dtype == torch.bool:
        return move(x.to(torch.uint8)).to(torch.bool)
    if x.is_complex():
        return torch.view_as_complex(move(torch.view_as_real(x.contiguous())).contiguous())
    return move(x.contiguous())


def _each_group(x: torch.Tensor, groups: list, kind: str, collective) -> torch.Tensor:
    """``collective(buffer, group)`` over each of ``groups`` in turn, each wait bounded."""
    for g in groups:
        x = _on_wire(x, lambda b: bounded(over(kind, g), [g], lambda: collective(b, g)))
    return x


def all_reduce(x: torch.Tensor, groups: list, op: str) -> torch.Tensor:
    """``x`` reduced (``op``: 'sum', 'max', 'min') over the ranks of every group in turn."""
    from .._torch_private import functional_all_reduce

    return _each_group(x.detach(), groups, f"all-reduce ({op})",
                       lambda b, g: functional_all_reduce(b, op, g))


class _Linear(torch.autograd.Function):
    """A linear collective over ``groups`` (``apply(x, *args, groups)``): its backward is
    its ``transpose`` class applied to the cotangent, its forward-mode rule itself on the
    tangent, its vmap rule itself on the batch."""

    transpose: type

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.args = inputs[1:]
        ctx.groups = inputs[-1]

    @classmethod
    def backward(cls, ctx, g):
        return (cls.transpose.apply(g, *ctx.args),) + (None,) * len(ctx.args)

    @classmethod
    def jvp(cls, ctx, t, *_):
        return cls.apply(t, *ctx.args)

    @classmethod
    def vmap(cls, info, in_dims, x, *args):
        return cls.apply(x, *args), in_dims[0]


class SumOverRanks(_Linear):
    """``psum`` across ranks: each rank's part -> their sum, the same on every rank of
    ``groups``; the transpose hands the (whole) cotangent on to every rank's part as
    it is (:class:`Varying`: differentiated again, it sums)."""

    @staticmethod
    def forward(x, groups):
        return all_reduce(x, groups, "sum")


class Varying(_Linear):
    """A value replicated over the mesh dims of ``groups``, as it is, on its way into a
    value split over them (JAX's ``pvary``); the transpose sums the ranks' parts of its
    cotangent there -- Megatron's "f" before a column-parallel layer.  With no groups, the
    identity."""

    @staticmethod
    def forward(x, groups):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return (SumOverRanks.apply(g, ctx.groups) if ctx.groups else g), None


class ExtremeOverRanks(torch.autograd.Function):
    """``pmax``/``pmin`` of the ranks' partial extremes; the cotangent (whole: the output
    is replicated) goes to each rank in proportion to how many of the entries attaining
    the extreme it holds (``share``)."""

    @staticmethod
    def forward(x, out, share):
        return out.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.share, ctx.groups = inputs[2]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.share, None, None

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


class _AlongDim(_Linear):
    """A linear collective along ``dim`` of ``x`` over ``groups`` (``apply(x, dim,
    groups)``): vmapped, on the batch moved first (``dim`` one further)."""

    @classmethod
    def vmap(cls, info, in_dims, x, dim, groups):
        return cls.apply(_leading(x, in_dims[0], info), dim + 1, groups), 0


def gather(x: torch.Tensor, dim: int, groups: list) -> torch.Tensor:
    """``x`` of every rank of ``groups`` concatenated along ``dim``: block ``c`` is rank
    ``c``'s, ``c`` counted over the mesh dims in order (the first the slowest), as a
    split axis's chunks are."""
    from .._torch_private import functional_all_gather

    return _each_group(x, groups[::-1], "all-gather",
                       lambda b, g: functional_all_gather(b, dim, g))


def own_block(groups: list) -> tuple:
    """(this rank's block index among the ranks of ``groups``, their number)."""
    here, count = 0, 1
    for dm, d in groups:
        here, count = here * dm.size(d) + dm.get_coordinate()[d], count * dm.size(d)
    return here, count


class GatherOverRanks(_AlongDim):
    """A split axis made whole: :func:`gather` along ``dim``, the same on every rank of
    ``groups``; the transpose keeps this rank's block of the (whole) cotangent."""

    @staticmethod
    def forward(x, dim, groups):
        return gather(x.detach(), dim, groups)


class ChunkOfWhole(_AlongDim):
    """A value replicated over the ranks of ``groups`` -> this rank's block along ``dim``
    (a split axis's chunk); the transpose gathers the ranks' cotangents whole."""

    @staticmethod
    def forward(x, dim, groups):
        here, count = own_block(groups)
        size = x.shape[dim] // count
        return x.narrow(dim, here * size, size)


class ScatterSumOverRanks(_AlongDim):
    """Each rank's part summed over the ranks of ``groups``, each keeping its own block
    along ``dim`` (a reduce-scatter); the transpose gathers the blocks' cotangents to
    every rank (:class:`GatherParts`)."""

    @staticmethod
    def forward(x, dim, groups):
        from .._torch_private import functional_reduce_scatter

        return _each_group(x.detach(), groups, "reduce-scatter",
                           lambda b, g: functional_reduce_scatter(b, dim, g))


class GatherParts(GatherOverRanks):
    """:func:`gather` of values that differ per rank (a reduce-scatter's cotangent); the
    transpose is the reduce-scatter."""


SumOverRanks.transpose = Varying   # (Varying sums in its own backward, the identity without groups)
GatherOverRanks.transpose, ChunkOfWhole.transpose = ChunkOfWhole, GatherOverRanks
ScatterSumOverRanks.transpose, GatherParts.transpose = GatherParts, ScatterSumOverRanks


class FirstCopy(torch.autograd.Function):
    """``x.select(dim, 0)``, ``x`` equal copies along a split axis; the cotangent goes to
    the axis's first index only: here when ``first``, else nowhere."""

    @staticmethod
    def forward(x, dim, first):
        return x.select(dim, 0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, ctx.dim, ctx.first = inputs
        ctx.shape = x.shape

    @staticmethod
    def backward(ctx, g):
        out = g.new_zeros(ctx.shape)
        if ctx.first:
            out.select(ctx.dim, 0).copy_(g)
        return out, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return t.select(ctx.dim, 0)

    @staticmethod
    def vmap(info, in_dims, x, dim, first):
        d = in_dims[0]
        if d is None:
            return FirstCopy.apply(x, dim, first), None
        x = x.movedim(d, 0)
        return FirstCopy.apply(x, dim + 1, first), 0
