"""Parallelism: run a named program over a mesh of devices, or in serial chunks.

``xmap(..., axis_resources={'batch': 'x'})`` inside ``with nx.Mesh(devices, ('x',))``
splits every value that carries ``batch`` over mesh axis ``x``.  A plan (pure Python,
:mod:`._plan`) decides where each named axis lives; engines execute it:

- local: the mesh axes used have size 1 — the program runs vectorized, as without resources;
- :mod:`._serial`: axes mapped to ``SerialLoop(k)`` run in ``k`` chunks;
- :mod:`._dtensor`: torch.distributed, one process per device (``torchrun``), DTensors;
- :mod:`._xla`: torch-xla SPMD, ``mark_sharding`` over an XLA mesh.

Results never depend on the resources, only where and how they are computed.
See ``docs/parallelism.md``.

>>> import numpy as np, torch, named_axes as nx
>>> f = nx.xmap(lambda x: nx.lax.psum(x, 'b'), in_axes=['b', ...], out_axes=[...],
...             axis_resources={'b': 'x'})
>>> with nx.Mesh(np.array(nx.local_devices()), ('x',)):
...     f(torch.ones(4, 2))
tensor([4., 4.])
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from .._modes import shapes_only
from .._torch_private import tracing_mode_active

from ._devices import (Device, backend_device, device_count, device_get,
                       device_put_replicated, device_put_sharded, devices, local_device_count,
                       local_devices, process_count, process_index)
from .. import _env
from ._dtensor_comms import SUMMARY
from ._rank_check import gather_ints
from ._mesh import Mesh, SerialLoop, current_mesh, mesh
from ._plan import Plan, make_plan, resource_conflicts
from ._auto import Candidate, ResourceReport, explain_resources, plan_resources
from ._rates import Rates, calibrate
from ._sharded import (NamedSharding, PartitionSpec, counter_normal, counter_uniform, device_put,
                       make_array_from_callback, make_array_from_process_local_data,
                       sharding_of)

__all__ = [
    "Mesh", "mesh", "SerialLoop", "devices", "local_devices", "device_count",
    "local_device_count", "process_index", "process_count", "device_put",
    "device_put_replicated", "device_put_sharded", "device_get", "Device", "Plan",
    "make_plan", "resource_conflicts", "run_partitioned", "current_mesh", "backend_device",
    "plan_for", "NamedSharding", "PartitionSpec", "make_array_from_process_local_data",
    "make_array_from_callback", "counter_normal", "counter_uniform", "sharding_of",
    "comm_summary", "plan_resources", "explain_resources", "calibrate", "Rates", "Candidate",
    "ResourceReport",
]


# nx.jit's programs on a mesh are alike on every rank (transforms/_jit.py asks)
_env.set_rank_agreement(gather_ints)


def comm_summary(reset: bool = False) -> dict:
    """What the DTensor engine moved on its own account since the last reset (input
    checks, redistributed inputs, gradient reductions, full/sharded outputs); see
    :class:`._dtensor_comms.CommSummary`.  ``reset=True`` clears it after reading."""
    out = SUMMARY.as_dict()
    if reset:
        SUMMARY.reset()
    return out


def plan_for(axis_resources: Mapping, axis_sizes: Mapping, *, what: str = "xmap") -> Plan:
    """The plan ``axis_resources`` gives under the mesh now in scope (checks docs/guide.md §5)."""
    m = current_mesh()
    return make_plan(axis_resources, mesh_shape=m.shape if m is not None else None,
                     axis_sizes=axis_sizes, what=what)


def _mesh_engine(plan: Plan, m: Mesh | None, backend: str | None):
    b = (backend or "").lower()
    if m is None or not plan.mesh_axes:
        return None
    if m.platform == "xla" or b in ("xla", "tpu"):
        from ._xla import XlaEngine

        return XlaEngine(plan, m)
    if not plan.uses_mesh:
        return None  # every mesh axis used has size 1: plain vectorized execution is exact
    from ._dtensor import DTensorEngine

    return DTensorEngine(plan, m, outputs=m.outputs)


def run_partitioned(body: Callable, named_args: list, *, axis_sizes: Mapping,
                    axis_resources: Mapping, backend: str | None = None,
                    donate_argnums: Sequence[int] = ()) -> list:
    """Run ``body(named_leaves, engine=...)`` with named axes placed per ``axis_resources``.

    The entry point xmap uses (see docs/CONTRACT.md).  ``named_args`` are the flat
    argument leaves (NamedTensors holding full logical values or DTensors, or other
    leaves); returns the flat output leaves as full values when every input was full,
    as DTensors laid out per the plan when some input was a DTensor (``Mesh(outputs=...)``
    overrides).  ``donate_argnums`` is accepted; no engine here reuses input buffers
    yet, so inputs are left intact.

    Raises:
        AxisResourceError: the docs/guide.md §5 checks (no mesh, unknown mesh axis, sizes not
            divisible, conflicting axes in one value).
    """
    m = current_mesh()
    plan = plan_for(axis_resources, axis_sizes)
    if tracing_mode_active() and shapes_only():
        return body(list(named_args))   # nx.eval_shape: where axes are computed changes no shape
    inner = _mesh_engine(plan, m, backend)
    loops = {n: k for n, k in plan.loops.items() if k > 1}   # one chunk: the whole axis
    if loops:
        from ._serial import SerialEngine

        return SerialEngine(loops, axis_sizes, inner).run(body, list(named_args))
    if inner is None:
        return body(list(named_args))
    return inner.run(body, list(named_args))
