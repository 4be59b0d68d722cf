"""Cotangents known to be the same on every rank of some mesh dims (the local-shard path).

On the local-shard path (:mod:`._dtensor_spmd`) a value replicated over mesh dims holds,
on each rank, a share of its cotangent; ``psum``'s transpose all-reduces the shares.
Where the shares are known to be equal on every rank of the dims summed over -- a full
output's cotangent, which every rank is handed alike, carried back through nodes that
negate, add, reshape or divide by a constant -- the sum is the share times the number
of ranks, and no all-reduce is needed (as DTensor's placements know a replicated
cotangent needs none).  The knowledge is a mark on the cotangent tensor: a fact about
its values, valid while the tensor's version counter is unchanged, so a cotangent
accumulated from another use, or changed in place, is all-reduced as before.

>>> import torch
>>> t = mark_uniform(torch.ones(2), "mesh", frozenset({0}))
>>> uniform_dims(t, "mesh"), uniform_dims(t.add_(1), "mesh")
(frozenset({0}), frozenset())
"""
from __future__ import annotations

import torch

__all__ = ["TARGETS", "mark_path_to_collectives", "mark_uniform", "uniform_dims"]

# The backward nodes the marks travel to: the local-shard path's psum and pmean division.
TARGETS = frozenset({"_SumOverRanksBackward", "_DivideByCountBackward"})

_UNIFORM = "_nx_uniform"   # (version, DeviceMesh, mesh dims) on a cotangent (module docstring)


def mark_uniform(t: torch.Tensor, dm, dims: frozenset) -> torch.Tensor:
    """Mark ``t`` as holding the same values on every rank along the mesh dims ``dims``."""
    if dims:
        setattr(t, _UNIFORM, (t._version, dm, dims))
    return t


def uniform_dims(t: torch.Tensor, dm) -> frozenset:
    """The mesh dims of ``dm`` along which ``t`` is marked the same on every rank (none
    once ``t`` changed in place after the mark)."""
    mark = getattr(t, _UNIFORM, None)
    if mark is None or mark[0] != t._version or mark[1] is not dm:
        return frozenset()
    return mark[2]


# Backward nodes that map a cotangent the same on every rank to one that is: they negate,
# add (each operand gets the cotangent), reshape, reduce or broadcast it -- nothing of the
# rank's own data enters.
_KEEPS_UNIFORM = frozenset({
    "NegBackward0", "AddBackward0", "SubBackward0", "RsubBackward1", "CloneBackward0",
    "AliasBackward0", "ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0",
    "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2",
    "PermuteBackward0", "TransposeBackward0", "TBackward0", "ExpandBackward0",
    "SumBackward0", "SumBackward1", "MeanBackward0", "MeanBackward1", "ToCopyBackward0"})


def _pass_uniform(dm):
    """A node post-hook: the node's input cotangents are the same on every rank along
    the dims its incoming ones all are (for nodes that keep that, ``_KEEPS_UNIFORM``)."""
    def hook(grad_inputs, grad_outputs):
        given = [g for g in grad_outputs if g is not None]
        if not given:
            return
        dims = frozenset.intersection(*(uniform_dims(g, dm) for g in given))
        for g in grad_inputs:
            if g is not None:
                mark_uniform(g, dm, dims)
    return hook


def mark_path_to_collectives(t: torch.Tensor, dm, limit: int = 32) -> None:
    """Let a mark on ``t``'s cotangent travel back to the collectives ``t`` was made from:
    a post-hook on each node that keeps it (``_KEEPS_UNIFORM``) on a path from ``t`` to a
    ``psum`` or a ``pmean``'s division (at most ``limit`` nodes looked at)."""
    seen: dict = {}   # node -> whether it leads to a collective

    def leads(node) -> bool:
        if node is None or len(seen) >= limit:
            return False
        if node in seen:
            return seen[node]
        kind = type(node).__name__
        if kind in TARGETS:
            seen[node] = True
            return True
        seen[node] = False
        if kind not in _KEEPS_UNIFORM:
            return False
        found = [leads(nxt) for nxt, _ in node.next_functions]
        if any(found):
            seen[node] = True
            node.register_hook(_pass_uniform(dm))
        return seen[node]

    leads(t.grad_fn)
