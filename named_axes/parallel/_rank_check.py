"""Ranks that do not agree: the DTensor engine's cross-rank input check, and collectives
whose ranks do not all arrive.

Ranks given inputs of different structure would pair unrelated collectives (a silent
wrong answer or a hang): one all-gather of a digest checks them, and the descriptions are
exchanged only when the digests differ, to name the ranks and leaves in the error.

Past the process group's timeout, the ranks that waited in a collective raise an
:class:`AxisResourceError` naming the ranks that did not come: each writes which collective
it waited in (counted per process) to the rendezvous store (``MASTER_ADDR``/
``MASTER_PORT``), waits a moment, and reads who wrote.  Nothing is written while
collectives complete.

>>> import torch
>>> fingerprint([torch.zeros(2, 3), 1.5])
['leaf 0: torch.float32 (2, 3)', 'leaf 1: 1.5']
>>> timed_out(RuntimeError("Timed out waiting 5000ms for recv operation to complete"))
True
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Callable

import torch

from .._errors import AxisResourceError
from .._tensor import NamedTensor

__all__ = ["bounded", "check_ranks_agree", "check_once", "fingerprint", "gather_ints", "over",
           "structure_key", "timed_out"]


def gather_ints(value: int) -> list:
    """``value`` of every rank of the mesh in scope (its input-check group: the whole
    process group unless the mesh spans fewer ranks), ``[value]`` without
    torch.distributed or before a mesh spanning fewer ranks built its groups; the wait
    bounded by the group's timeout."""
    import torch.distributed as dist

    from ._mesh import current_mesh

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    m = current_mesh()
    group = m._cache.get("check_group") if m is not None else None
    if group is None and m is not None and "device_mesh" not in m._cache \
            and m.size < dist.get_world_size():
        # the mesh's groups, which every rank builds at once, are not built: no program
        # holds its communication, and the ranks outside it need not be here
        return [value]
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


def structure_key(leaves: list) -> tuple:
    """A cheap hashable key of the inputs' structure (what :func:`fingerprint` spells)."""
    key = []
    for x in leaves:
        d = x._data if isinstance(x, NamedTensor) else x
        if isinstance(d, torch.Tensor):
            key.append((d.dtype, tuple(d.shape), getattr(x, "_names", None),
                        tuple(d.placements) if type(d).__name__ == "DTensor" else None))
        elif x is None or isinstance(x, (bool, int, float, complex, str)):
            key.append((type(x), x))
        else:
            key.append(type(x))
    return tuple(key)


_MAX_CHECKED = 256


def check_once(cache: dict, leaves: list) -> bool:
    """:func:`check_ranks_agree` on the inputs of a call on the mesh whose ``_cache`` is
    ``cache``, once per new input structure; whether it ran."""
    checked = cache.setdefault("checked_structures", set())
    key = structure_key(leaves)
    try:
        if key in checked:
            return False
    except TypeError:   # an unhashable leaf: check every call
        key = None
    check_ranks_agree(leaves, cache.get("check_group"))
    if key is not None:
        if len(checked) >= _MAX_CHECKED:
            checked.clear()
        checked.add(key)
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


_COUNT = [0]   # collectives this process issued through bounded()
_GRACE_S = 3.0   # how long a rank that timed out waits for the others' reports


def timed_out(e: BaseException) -> bool:
    """Whether ``e`` is a collective's wait that ran past the process group's timeout --
    or that another waiting rank's timeout cut short (gloo closes that rank's
    connections: "Connection closed by peer", "Application timeout caused pair
    closure", within a moment of the timeout)."""
    text = str(e)
    return ("Timed out" in text or "timed out" in text or "Connection closed by peer" in text
            or "Application timeout" in text or type(e).__name__ == "DistTimeoutError")


def bounded(what: str, groups: list, run: Callable):
    """``run()``, a collective over the ranks of ``groups`` (``(DeviceMesh, dim)`` pairs or
    process groups; ``None``: the default group), described as ``what``; past the timeout
    an :class:`AxisResourceError` naming the ranks that did not arrive."""
    if torch.compiler.is_dynamo_compiling():
        return run()
    _COUNT[0] += 1
    try:
        return run()
    except RuntimeError as e:
        if not timed_out(e):
            raise
        raise AxisResourceError(_report(what, groups, _COUNT[0], e)) from None


def _ranks(groups: list) -> list:
    import torch.distributed as dist

    ranks: set = set()
    for g in groups:
        pg = g[0].get_group(g[1]) if isinstance(g, tuple) else g
        ranks.update(dist.get_process_group_ranks(pg) if pg is not None
                     else range(dist.get_world_size()))
    return sorted(ranks)


def over(kind: str, group: tuple) -> str:
    """``kind`` over the mesh dim of ``group`` (``(DeviceMesh, dim)``), in words."""
    dm, d = group
    names = getattr(dm, "mesh_dim_names", None)
    return f"{kind} over mesh dim {names[d] if names else d!r}"


def _report(what: str, groups: list, count: int, e: BaseException) -> str:
    import torch.distributed as dist

    me, ranks = dist.get_rank(), _ranks(groups)
    head = (f"{what}: rank {me} waited past the process group's timeout (collective "
            f"{count} of this process, among ranks {ranks})")
    store = _store()
    if store is None:
        return (head + "; which of them did not arrive is unknown (no MASTER_ADDR/"
                "MASTER_PORT to ask). Every rank must run the same program on alike inputs")
    store.set(f"named_axes/stall/{count}/{me}", what)
    store.set(f"named_axes/at/{me}", f"{what} (collective {count})")
    deadline = time.monotonic() + _GRACE_S
    while True:
        missing = [r for r in ranks if not store.check([f"named_axes/stall/{count}/{r}"])]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not missing:
        return head + "; every rank arrived but the wait timed out (a slow link?)"
    where = []
    for r in missing:
        if store.check([f"named_axes/at/{r}"]):
            where.append(f"rank {r} waits in {store.get(f'named_axes/at/{r}').decode()}")
        else:
            where.append(f"rank {r} is not in a collective of named_axes")
    return (head + f"; ranks {missing} did not arrive (" + "; ".join(where) + "). Every "
            "rank must run the same program on alike inputs, calling the same collectives "
            "in the same order")


def _store():
    """A client of the rendezvous store, or None."""
    import torch.distributed as dist

    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        return None
    try:
        return dist.TCPStore(addr, int(port), is_master=False,
                             timeout=timedelta(seconds=10))
    except RuntimeError:
        return None
