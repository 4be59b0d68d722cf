"""Collectives whose ranks do not all arrive: the wait is bounded by the process group's
timeout (``init_process_group(timeout=...)``), and the ranks that waited raise an
:class:`AxisResourceError` naming the ranks that did not come, instead of gloo's
``Timed out waiting ... for recv operation``.

Which ranks came is learned after the timeout, through torch.distributed's rendezvous
store (``MASTER_ADDR``/``MASTER_PORT``, as ``torchrun`` sets them): each rank that timed
out writes which collective it waited in (counted per process: ranks running the same
program count alike), waits a moment for the others, and reads who wrote.  Nothing is
written while collectives complete.

>>> timed_out(RuntimeError("Timed out waiting 5000ms for recv operation to complete"))
True
>>> timed_out(RuntimeError("shape mismatch"))
False
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Callable

from .._errors import AxisResourceError

__all__ = ["bounded", "over", "timed_out"]

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
    import torch

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
    missing = ranks
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
