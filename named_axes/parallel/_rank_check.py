"""The DTensor engine's cross-rank input check: every rank must pass inputs of the same
structure (kind, dtype, shape, names, layout), or unrelated collectives pair up -- a
silent wrong answer or a hang.  One all-gather of an 8-byte digest; the descriptions are
exchanged only when the digests differ, to name the ranks and the leaves in the error.

>>> import torch
>>> from named_axes.parallel._rank_check import fingerprint
>>> fingerprint([torch.zeros(2, 3), 1.5])
['leaf 0: torch.float32 (2, 3)', 'leaf 1: 1.5']
"""
from __future__ import annotations

import torch

from .._errors import AxisResourceError
from .._tensor import NamedTensor
from ._stall import bounded

__all__ = ["check_ranks_agree", "check_once", "fingerprint", "gather_ints"]


def gather_ints(value: int) -> list:
    """``value`` of every rank of the mesh in scope (its input-check group: the whole
    process group unless the mesh spans fewer ranks), ``[value]`` without
    torch.distributed; the wait bounded by the group's timeout."""
    import torch.distributed as dist

    from ._mesh import current_mesh

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    m = current_mesh()
    group = m._cache.get("check_group") if m is not None else None
    return _all_gather_int(value, group, "the ranks' agreement on an nx.jit program")


def _all_gather_int(value: int, group, what: str) -> list:
    """``value`` of every rank of ``group`` (one all-gather of an int64), described as
    ``what`` if a rank does not arrive."""
    import torch.distributed as dist

    mine = torch.tensor([value], dtype=torch.int64)
    seen = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    bounded(what, [group], lambda: dist.all_gather(seen, mine, group=group))
    return [int(t) for t in seen]


def fingerprint(leaves: list) -> list:
    """What every rank must agree on: each input leaf's kind, dtype, shape and names."""
    out = []
    for i, x in enumerate(leaves):
        if isinstance(x, NamedTensor):
            out.append(f"leaf {i}: {x._data.dtype} physical {tuple(x._data.shape)} "
                       f"named {x._names!r}{_layout(x._data)}")
        elif isinstance(x, torch.Tensor):
            out.append(f"leaf {i}: {x.dtype} {tuple(x.shape)}{_layout(x)}")
        elif x is None or isinstance(x, (bool, int, float, complex, str)):
            out.append(f"leaf {i}: {x!r}")
        else:
            out.append(f"leaf {i}: {type(x).__name__}")
    return out


def _layout(x) -> str:
    if type(x).__name__ == "DTensor":
        return f" sharded {[str(p) for p in x.placements]}"
    return ""


_MAX_CHECKED = 256


def check_once(cache: dict, leaves: list) -> bool:
    """:func:`check_ranks_agree` on the inputs of a call on the mesh whose ``_cache`` is
    ``cache``, once per new input structure (its :func:`fingerprint`); whether it ran."""
    desc = tuple(fingerprint(leaves))
    checked = cache.setdefault("checked_structures", set())
    if desc in checked:
        return False
    check_ranks_agree(leaves, cache.get("check_group"))
    if len(checked) >= _MAX_CHECKED:
        checked.clear()
    checked.add(desc)
    return True


def check_ranks_agree(leaves: list, group, what: str = "xmap") -> None:
    """Raise on every rank, naming the ranks, when ranks pass differently shaped inputs
    (see the module docstring: all ranks see the same digests, so all take one path)."""
    import hashlib

    import torch.distributed as dist

    desc = fingerprint(leaves)
    digest = hashlib.blake2b("\n".join(desc).encode(), digest_size=7).digest()
    mine = int.from_bytes(digest, "little")
    world = dist.get_world_size(group)
    if all(s == mine for s in _all_gather_int(mine, group,
                                              f"{what}'s input check (an all-gather)")):
        return
    descs: list = [None] * world
    dist.all_gather_object(descs, desc, group=group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(world))
    me = dist.get_rank()
    ref = descs[0]
    lines = []
    for r, d in zip(ranks, descs):
        diff = [f"{a}  (rank {ranks[0]}: {b})" for a, b in zip(d, ref) if a != b]
        if len(d) != len(ref):
            diff.append(f"{len(d)} input leaves (rank {ranks[0]}: {len(ref)})")
        if diff:
            lines.append(f"  rank {r}: " + "; ".join(diff))
    raise AxisResourceError(
        f"{what} on the DTensor engine (rank {me} of {world}): the ranks were given "
        "different inputs:\n" + "\n".join(lines) + "\nUnder torch.distributed every rank "
        "passes the same full (global) inputs and the engine splits them; give every rank "
        "the same arguments.")
