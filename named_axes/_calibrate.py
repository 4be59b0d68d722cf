"""The part of ``nx.calibrate`` that runs named programs: what the dispatcher and the
engines add to an op and to a collective (registered with ``parallel._rates``, which
sits below xmap and cannot build one itself).

>>> from named_axes import _calibrate
>>> sorted(_calibrate.measure_in_programs())           # one process: no ranks to time
['op_s']
"""
from __future__ import annotations

import numpy as np
import torch

from ._xmap import xmap
from .lax import psum
from .parallel import Mesh, devices
from .parallel._rates import PROGRAM_PROBE, best_time, world_size

__all__ = ["measure_in_programs"]


def _chain(ops: int, sums: int, world: int, split: bool):
    """An xmap of ``ops`` elementwise ops, then ``|sums|`` stretches of work each ended
    by a ``psum`` over the split axis (``sums < 0``: the same work, no psum)."""
    w = torch.full((256, 256), 1 / 256)

    def body(v):
        for _ in range(ops):
            v = v * 1.0
        for _ in range(abs(sums)):
            v = v @ w @ w @ w
            if sums > 0:
                v = psum(v, "i") * (1.0 / world)
        return v
    return xmap(body, in_axes=["i", ...], out_axes=["i", ...],
                axis_resources={"i": "x"} if split else None)


def measure_in_programs() -> dict:
    """The time of one named op, and over the ranks (all of them on one mesh axis) of an
    op over a split axis and of a ``psum`` between stretches of work (ranks reach it at
    different times: on a busy host that wait is most of a collective's cost)."""
    world = world_size()
    x = torch.ones(world, 64, 256)

    def timed(ops: int, sums: int, split: bool) -> float:
        f = _chain(ops, sums, world, split)
        if world == 1:
            return best_time(lambda: f(x))
        return best_time(lambda: (torch.distributed.barrier(), f(x)))
    out = {"op_s": max(timed(40, 0, False) - timed(0, 0, False), 0.0) / 40}
    if world > 1:
        with Mesh(np.array(devices()), ("x",)):
            base, work = timed(0, 0, True), timed(0, -10, True)
            out["split_op_s"] = max(timed(40, 0, True) - base, 0.0) / 40
            out["link_latency_s"] = max(timed(0, 10, True) - work, 0.0) / 10
    return out


PROGRAM_PROBE[:] = [measure_in_programs]
