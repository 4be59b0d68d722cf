"""The part of ``nx.calibrate`` that times named programs: what the dispatcher and the
engines add to an op and to a collective (registered with ``parallel._rates``, which
sits below xmap).

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
    """An xmap of ``ops`` products with a parameter, then ``|sums|`` matrix products, each
    followed by a ``psum`` over the split axis and a product with its own parameter
    (``sums < 0``: the same work, one parameter, no psum)."""
    w = torch.eye(256) + 1e-3
    scales = [torch.ones((), requires_grad=True) for _ in range(max(abs(sums), 1))]

    def body(v):
        v = v * scales[0]
        for _ in range(ops):
            v = v * scales[0]
        for k in range(abs(sums)):
            v = v @ w
            v = psum(v, "i") * scales[k] * (1.0 / world) if sums > 0 else v * scales[0]
        return v
    return xmap(body, in_axes=["i", ...], out_axes=["i", ...],
                axis_resources={"i": "x"} if split else None)


def _inputs(k: int, world: int, grad: bool):
    """A training step of an xmap whose ``k`` inputs are split over the ranks (with
    ``grad``, needing gradients, which are gathered whole at the end)."""
    xs = [torch.ones(world, 64, 64, requires_grad=grad) for _ in range(k)]
    scale = torch.ones((), requires_grad=True)

    def body(*vs):
        out = vs[0] * scale
        for v in vs[1:]:
            out = out + v * scale
        return out
    f = xmap(body, in_axes=[["i", ...]] * k, out_axes=["i", ...], axis_resources={"i": "x"})
    return lambda: f(*xs).sum().backward()


def measure_in_programs() -> dict:
    """Time training steps of small named programs: one op, and over the ranks (one mesh
    axis) an op over a split axis, the fixed cost of a call that splits an axis, and a
    ``psum`` between stretches of work (on a busy host, waiting for the other ranks is
    most of a collective's cost)."""
    world = world_size()
    small = torch.ones(world, 8)
    big = torch.ones(world, 512, 256)   # about a millisecond of work between two psums

    def timed(ops: int, sums: int, split: bool) -> float:
        f, x = _chain(ops, sums, world, split), big if sums else small
        run = lambda: f(x).sum().backward()  # noqa: E731
        if world == 1:
            return best_time(run)
        # the median: ranks drift, and a lucky run would hide the waits
        return best_time(lambda: (torch.distributed.barrier(), run()), 7, typical=True)
    # an op and its backward (the model counts a backward as two forwards)
    plain = timed(0, 0, False)
    out = {"op_s": max(timed(40, 0, False) - plain, 0.0) / 40 / 3}
    if world > 1:
        with Mesh(np.array(devices()), ("x",)):
            base, work = timed(0, 0, True), timed(0, -20, True)
            out["split_op_s"] = max(timed(40, 0, True) - base, 0.0) / 40 / 3
            out["mesh_call_s"] = max(base - plain, 0.0)
            # 20 psums, and 19 more sums of the parameters' gradients in the backward
            out["link_latency_s"] = max(timed(0, 20, True) - work, 0.0) / 39
            extra = [best_time(lambda f=_inputs(k, world, g): (torch.distributed.barrier(), f()),
                               7, typical=True) for k in (1, 5) for g in (True, False)]
            out["edge_gather_s"] = max((extra[2] - extra[3]) - (extra[0] - extra[1]), 0.0) / 4
    return out


PROGRAM_PROBE[:] = [measure_in_programs]
