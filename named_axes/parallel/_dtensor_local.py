"""``pdot`` and ``psum``/``pmean`` of DTensors computed on each rank's own shards, forward
and backward, as Megatron's column- and row-parallel layers do.

DTensor's own strategies are free to pick any layout, and pick global ones: for the
backward of a column-parallel matmul its einsum all-gathers the weight (a full weight on
every rank) and leaves the weight's gradient a ``Partial`` of global shape; the backward
of a mean over a split batch expands the cotangent to a replicated, global-batch tensor.
Here the layout is read off the operands instead.  Per mesh dim, the letter the
operands are split on (the same in both, or carried by one only) gives the result's
placement: ``Shard`` where the result keeps the letter, ``Partial`` where it is summed
away; a ``Partial`` operand times a replicated one is ``Partial``.  The backward mirrors
it, so every gradient is laid out like its operand (``Partial`` where the operand is
replicated).  Any other combination (two letters on one mesh dim, a letter split in one
operand and whole in the other, a strided shard) returns None and DTensor runs the op.

>>> import torch
>>> from named_axes.parallel._dtensor_local import out_placements
>>> from torch.distributed.tensor import Shard, Replicate
>>> out_placements("bk,kn->bn", (Shard(0), Replicate()), (Replicate(), Shard(1)))
[Shard(dim=0), Shard(dim=1)]
"""
from __future__ import annotations

import functools
import math
from typing import Any

import torch

from .._einsum2 import einsum2_eager
from .._torch_private import dtensor_spec, local_tensor

__all__ = ["local_einsum", "local_sum", "out_placements", "settled_extreme", "settled_placements"]


def _letter(p, letters: str):
    """``('shard', letter)``, ``('partial', None)``, ``('replicate', None)``, or None for
    a placement this module does not reason about (a strided shard, a max/min partial)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    kind = type(p)
    if kind is Shard:
        return "shard", letters[p.dim]
    if kind is Replicate:
        return "replicate", None
    if kind is Partial and p.reduce_op == "sum":
        return "partial", None
    return None


def out_placements(eq: str, x_places, y_places) -> list | None:
    """The result's placements (one per mesh dim) of ``einsum(eq, x, y)`` computed shard
    by shard from operands laid out ``x_places`` and ``y_places``, or None if those
    layouts do not allow it."""
    places = _out_placements(eq, tuple(x_places), tuple(y_places))
    return None if places is None else list(places)


@functools.lru_cache(maxsize=512)
def _out_placements(eq: str, xp: tuple, yp: tuple) -> tuple | None:
    from torch.distributed.tensor import Partial, Replicate, Shard

    lhs, out = eq.split("->")
    tx, ty = lhs.split(",")
    result = []
    for px, py in zip(xp, yp):
        a, b = _letter(px, tx), _letter(py, ty)
        if a is None or b is None:
            return None
        kinds = {a[0], b[0]}
        if "partial" in kinds:   # bilinear: a partial sum times a replicated value only
            if kinds != {"partial", "replicate"}:
                return None
            result.append(Partial())
            continue
        letter = a[1] or b[1]
        if letter is None:
            result.append(Replicate())
            continue
        if a[1] is not None and b[1] is not None and a[1] != b[1]:
            return None
        # the letter must be split in every operand that carries it
        if (letter in tx and a[1] != letter) or (letter in ty and b[1] != letter):
            return None
        result.append(Shard(out.index(letter)) if letter in out else Partial())
    return tuple(result)


def _global_shape(eq: str, x, y) -> tuple:
    lhs, out = eq.split("->")
    tx, ty = lhs.split(",")
    size = dict(zip(tx, x.shape))
    size.update(zip(ty, y.shape))
    return tuple(size[c] for c in out)


def _contiguous_stride(shape: tuple) -> tuple:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= s
    return tuple(reversed(stride))


def _from_local(local: torch.Tensor, dm, placements, shape: tuple):
    """A DTensor of global ``shape`` from this rank's shard, made directly (as DTensor's
    own ``_dispatch.wrap`` does; ``DTensor.from_local`` is an autograd function, a cost
    paid per op).  Only called where no graph is recorded: in a forward of an autograd
    function, or a backward that is not differentiated again."""
    from torch.distributed.tensor import DTensor

    shape = torch.Size(shape)
    if not local.is_contiguous():   # the spec below says contiguous: DTensor's reshape
        local = local.contiguous()  # then views the shard (a permuted mm result cannot)
    spec = dtensor_spec(dm, tuple(placements), shape, _contiguous_stride(shape), local.dtype)
    return DTensor(local, spec, requires_grad=False)


def settled_placements(places) -> list:
    """The layout a cotangent of a result laid out ``places`` comes back in: a partial sum's
    cotangent is the same on every rank."""
    from torch.distributed.tensor import Replicate

    return [Replicate() if p.is_partial() else p for p in places]


def _grad(g, go: str, other, to: str, mine: str, like) -> Any:
    """d einsum(mine, to -> go) / d mine applied to ``g``, shard by shard; letters only in
    ``mine`` were summed in the forward, so the gradient is broadcast along them (over the
    local size: a split one stays split)."""
    from torch.distributed.tensor import Shard

    avail = set(go) | set(to)
    keep = "".join(c for c in mine if c in avail)
    eq = f"{go},{to}->{keep}"
    if torch.is_grad_enabled():   # differentiated again (create_graph=True): DTensor's
        # ops record the graph (a shard's gradient is a partial sum where its DTensor is
        # replicated, which only DTensor's own ops know to say)
        view = [like.shape[i] if c in avail else 1 for i, c in enumerate(mine)]
        return torch.einsum(eq, g, other).reshape(view).expand(like.shape)
    places = _out_placements(eq, tuple(g.placements), tuple(other.placements))
    assert places is not None, (eq, g.placements, other.placements)   # mirrors the forward
    local = einsum2_eager(eq, local_tensor(g), local_tensor(other))
    local_shape = local_tensor(like).shape
    view = [local_shape[i] if c in avail else 1 for i, c in enumerate(mine)]
    local = local.reshape(view).expand(local_shape)
    placements = []
    for k, p in enumerate(places):
        if type(p) is Shard:   # keep-dim -> mine-dim
            p = Shard(mine.index(keep[p.dim]))
        elif p.is_replicate() and type(like.placements[k]) is Shard:
            p = like.placements[k]   # split along a broadcast letter: the local expand split it
        placements.append(p)
    return _from_local(local, like.device_mesh, placements, tuple(like.shape))


class _LocalEinsum(torch.autograd.Function):
    @staticmethod
    def forward(x, y, eq, places):
        out = einsum2_eager(eq, local_tensor(x), local_tensor(y))
        return _from_local(out, x.device_mesh, places, _global_shape(eq, x, y))

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, ctx.eq, ctx.places = inputs
        ctx.save_for_backward(x, y)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        want = settled_placements(ctx.places)
        if tuple(g.placements) != tuple(want):
            g = g.redistribute(g.device_mesh, want)
        lhs, out = ctx.eq.split("->")
        tx, ty = lhs.split(",")
        gx = _grad(g, out, y, ty, tx, x) if ctx.needs_input_grad[0] else None
        gy = _grad(g, out, x, tx, ty, y) if ctx.needs_input_grad[1] else None
        return gx, gy, None, None


def _forward_ad() -> bool:
    """Whether forward-mode AD is running (these functions define no ``jvp``: DTensor's
    own ops carry the tangents)."""
    from ..lax._ops import forward_mode

    return forward_mode()


def local_einsum(eq: str, x: Any, y: Any) -> Any:
    """``einsum(eq, x, y)`` of two DTensors on one mesh, shard by shard, or None where
    their layouts need DTensor's general einsum (then nothing was computed)."""
    from torch.distributed.tensor import DTensor

    if type(x) is not DTensor or type(y) is not DTensor or x.device_mesh != y.device_mesh \
            or _forward_ad():
        return None
    places = _out_placements(eq, tuple(x.placements), tuple(y.placements))
    if places is None:
        return None
    if not (x.requires_grad or y.requires_grad) or not torch.is_grad_enabled():
        return _LocalEinsum.forward(x, y, eq, places)
    return _LocalEinsum.apply(x, y, eq, places)


def _sum_placements(places: tuple, dims: tuple) -> tuple | None:
    """The placements of ``x.sum(dims)`` computed shard by shard, or None."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    out = []
    for p in places:
        kind = type(p)
        if kind is Shard:
            out.append(Partial() if p.dim in dims
                       else Shard(p.dim - sum(d < p.dim for d in dims)))
        elif kind is Replicate or (kind is Partial and p.reduce_op == "sum"):
            out.append(p)
        else:
            return None
    return tuple(out)


class _LocalSum(torch.autograd.Function):
    @staticmethod
    def forward(x, dims, mean, places):
        local = local_tensor(x).sum(dims)
        if mean:
            local = local / math.prod(x.shape[d] for d in dims)
        shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
        return _from_local(local, x.device_mesh, places, shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, ctx.dims, ctx.mean, ctx.places = inputs
        ctx.like = (x.device_mesh, tuple(x.placements), tuple(x.shape), local_tensor(x).shape)

    @staticmethod
    def backward(ctx, g):
        dm, x_places, shape, local_shape = ctx.like
        want = settled_placements(ctx.places)
        if tuple(g.placements) != tuple(want):
            g = g.redistribute(dm, want)
        n = math.prod(shape[d] for d in ctx.dims) if ctx.mean else 1
        if torch.is_grad_enabled():   # differentiated again: DTensor's ops (see _grad)
            view = [1 if d in ctx.dims else s for d, s in enumerate(shape)]
            return (g / n).reshape(view).expand(shape), None, None, None
        local = local_tensor(g) / n if n != 1 else local_tensor(g)
        view = [1 if d in ctx.dims else s for d, s in enumerate(local_shape)]
        local = local.reshape(view).expand(local_shape)
        return _from_local(local, dm, settled_placements(x_places), shape), None, None, None


def local_sum(x: Any, dims: list, mean: bool) -> Any:
    """``x.sum(dims)`` (``x.mean(dims)`` if ``mean``) of a DTensor, shard by shard: split
    dims summed become ``Partial``; the gradient is laid out like ``x``.  None where
    ``x``'s layout needs DTensor's own reduction."""
    from torch.distributed.tensor import DTensor

    if type(x) is not DTensor or not dims or not (x.is_floating_point() or x.is_complex()) \
            or _forward_ad():
        return None
    dims = tuple(sorted(d % x.dim() for d in dims))
    places = _sum_placements(tuple(x.placements), dims)
    if places is None or not any(p.is_partial() and not q.is_partial()
                                 for p, q in zip(places, x.placements)):
        return None   # nothing split is summed: DTensor's own sum is as local, and cheaper
    if not x.requires_grad or not torch.is_grad_enabled():
        return _LocalSum.forward(x, dims, mean, places)
    return _LocalSum.apply(x, dims, mean, places)


@functools.lru_cache(maxsize=1)
def _settled_extreme_fn():
    from ..lax._ops import _PExtreme

    class _SettledExtreme(_PExtreme):
        """``pmax``/``pmin`` whose result is all-reduced where it is formed: DTensor's own
        ``amax`` leaves a ``Partial(max)``, and the backward of its later redistribution
        (``Partial(max) -> Replicate``) is one DTensor cannot take (torch 2.13 asserts).
        The backward is ``_PExtreme``'s: shared among the entries attaining the extreme."""

        @staticmethod
        def forward(x, dims, is_max):
            out = _PExtreme.forward(x, dims, is_max)
            return out.redistribute(out.device_mesh, settled_placements(out.placements))

    return _SettledExtreme


def settled_extreme(x: Any, dims: list, is_max: bool) -> Any:
    """``x.amax(dims)`` (``amin``) of a DTensor made replicated where split dims are reduced,
    differentiably; None where DTensor's own reduction leaves nothing partial."""
    from torch.distributed.tensor import DTensor

    if type(x) is not DTensor or not dims or _forward_ad():
        return None
    dims = sorted(d % x.dim() for d in dims)
    if not any(p.is_shard() and p.dim in dims for p in x.placements):
        return None
    if not x.requires_grad or not torch.is_grad_enabled():
        out = x.amax(dims) if is_max else x.amin(dims)
        return out.redistribute(out.device_mesh, settled_placements(out.placements))
    return _settled_extreme_fn().apply(x, dims, is_max)
