"""Devices and moving values onto them: JAX's device helpers, on torch devices.

One :class:`Device` per place a shard can live: under ``torchrun`` (an initialized
``torch.distributed`` process group) one device per rank, with ``id == rank``; with
torch-xla (``backend='xla'``) the XLA SPMD devices; otherwise the local CUDA devices,
or the CPU.  ``torch.distributed`` and ``torch_xla`` are imported only when used.

>>> import torch, named_axes as nx
>>> nx.device_count(), nx.process_index(), nx.process_count()
(1, 0, 1)
>>> nx.devices()
[Device(id=0, platform='cpu', process_index=0)]
>>> nx.device_get(nx.device_put(torch.ones(2)))
tensor([1., 1.])
>>> nx.device_put_replicated(torch.ones(2), nx.devices()).shape
torch.Size([1, 2])
"""
from __future__ import annotations

import numbers
import os
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .._errors import AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from .._torch_private import tree_flatten, tree_map, tree_unflatten

__all__ = [
    "Device", "as_device", "devices", "local_devices", "device_count", "local_device_count",
    "process_index", "process_count", "device_put_replicated",
    "device_put_sharded", "device_get", "backend_device", "dist_initialized", "ensure_spmd",
    "xla_device", "xla_devices", "target",
]


@dataclass(frozen=True)
class Device:
    """One device of a mesh: its global ``id``, ``platform`` and owning ``process_index``."""

    id: int
    platform: str = "cpu"
    process_index: int = 0

    @property
    def torch_device(self) -> torch.device:
        """The ``torch.device`` this process uses to hold this device's data."""
        if self.platform == "xla":
            return xla_device()
        if self.platform == "cuda":
            n = torch.cuda.device_count() or 1
            return torch.device("cuda", self.id % n)
        return torch.device("cpu")


def dist_initialized() -> bool:
    """True when a torch.distributed default process group exists (checked lazily)."""
    if "torch.distributed" not in sys.modules and "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _dist_platform() -> str:
    import torch.distributed as dist

    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def _norm_backend(backend: str | None) -> str | None:
    if backend is None:
        return None
    b = str(backend).lower()
    return {"gpu": "cuda", "tpu": "xla"}.get(b, b)


def devices(backend: str | None = None) -> list[Device]:
    """All devices of the job (every process's), ordered by id.

    Args:
        backend: ``'cpu'``, ``'cuda'`` or ``'xla'``; by default the process group's
            devices under torchrun, else the local CUDA devices, else the CPU.
    """
    b = _norm_backend(backend)
    if b == "xla":
        return xla_devices()
    if dist_initialized() and b in (None, _dist_platform()):
        import torch.distributed as dist

        plat = _dist_platform()
        return [Device(r, plat, r) for r in range(dist.get_world_size())]
    if b == "cuda" or (b is None and torch.cuda.is_available()):
        return [Device(i, "cuda", 0) for i in range(torch.cuda.device_count())]
    return [Device(0, "cpu", 0)]


def local_devices(backend: str | None = None) -> list[Device]:
    """The devices this process drives."""
    me = process_index(backend)
    return [d for d in devices(backend) if d.process_index == me]


def device_count(backend: str | None = None) -> int:
    """How many devices the job has (all processes)."""
    return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
    """How many devices this process drives."""
    return len(local_devices(backend))


def process_index(backend: str | None = None) -> int:
    """This process's index (its torch.distributed rank; 0 outside torchrun)."""
    return _process(backend, "process_index", "get_rank", 0)


def process_count(backend: str | None = None) -> int:
    """How many processes the job has (the torch.distributed world size; 1 outside torchrun)."""
    return _process(backend, "process_count", "get_world_size", 1)


def _process(backend: str | None, xla_name: str, dist_name: str, alone: int) -> int:
    if _norm_backend(backend) == "xla":
        import torch_xla.runtime as xr

        return int(getattr(xr, xla_name)())
    if dist_initialized():
        import torch.distributed as dist

        return getattr(dist, dist_name)()
    return alone


def as_device(d: Any) -> Device:
    """Read a mesh entry: a :class:`Device`, an int id/rank, or a ``torch.device``/str."""
    if isinstance(d, Device):
        return d
    if isinstance(d, int) and not isinstance(d, bool):
        return {x.id: x for x in devices()}.get(d, Device(d, "cpu", d))
    if isinstance(d, (str, torch.device)):
        td = torch.device(d)
        if td.type == "xla":
            return Device(td.index or 0, "xla", 0)
        if td.type in ("cuda", "cpu"):
            return Device(td.index or 0, td.type, process_index())
    raise AxisTypeError(f"Mesh: {d!r} is not a device; use entries of nx.devices(), int ranks "
                        f"or torch.device objects")


def backend_device(backend: str | None) -> torch.device | None:
    """The ``torch.device`` that ``backend=`` ('cpu', 'cuda', 'xla') runs on."""
    b = _norm_backend(backend)
    if b is None:
        return None
    if b == "xla":
        return xla_device()
    return torch.device(b)


def target(device: Any) -> torch.device | None:
    """The ``torch.device`` of a :class:`Device`, a ``torch.device`` or a backend name."""
    if isinstance(device, Device):
        return device.torch_device
    if isinstance(device, str):
        return backend_device(device)
    return None if device is None else torch.device(device)


def device_put_replicated(x: Any, devices: Sequence[Any]) -> Any:
    """Stack ``len(devices)`` copies of every tensor in ``x`` along a new leading axis.

    The result lives on the first device (a pmap-style leading axis; pmap/xmap split it).
    """
    devs = list(devices)
    if not devs:
        raise AxisSpecError("device_put_replicated: devices is empty")
    dev = target(as_device(devs[0]))

    def rep(v):
        if isinstance(v, (numbers.Number, np.ndarray, np.generic)):   # as JAX: an array
            v = torch.as_tensor(v)
        if isinstance(v, (torch.Tensor, NamedTensor)):   # (a NamedTensor: positionally)
            return v.to(dev).unsqueeze(0).expand(len(devs), *v.shape).clone()
        return v

    return tree_map(rep, x)


def device_put_sharded(shards: Sequence[Any], devices: Sequence[Any]) -> Any:
    """Stack one shard per device along a new leading axis (shards must have equal shapes)."""
    shards, devs = list(shards), list(devices)
    if len(shards) != len(devs):
        raise AxisSpecError(f"device_put_sharded: {len(shards)} shards for {len(devs)} devices; "
                            f"give one shard per device")
    dev = target(as_device(devs[0]))
    flats = [tree_flatten(s) for s in shards]
    spec = flats[0][1]
    cols = zip(*[f[0] for f in flats])
    out = [torch.stack([v.to(dev) if isinstance(v, NamedTensor) else torch.as_tensor(v).to(dev)
                        for v in col]) for col in cols]
    return tree_unflatten(out, spec)


def device_get(x: Any) -> Any:
    """Bring every tensor in ``x`` back to host memory as full CPU tensors.

    DTensors are gathered (a collective: call it on every rank), XLA tensors are
    computed and copied.  NamedTensors keep their names.
    """

    def get(v):
        if isinstance(v, NamedTensor):
            return NamedTensor._wrap(get(v._data), v._names)
        if isinstance(v, torch.Tensor):
            if type(v).__name__ == "DTensor":
                v = v.full_tensor()
            return v.detach().cpu() if v.device.type != "cpu" else v
        return v

    return tree_map(get, x)


# -- torch-xla's devices (torch_xla imported when first used) ----------------------

_spmd = False


def ensure_spmd() -> None:
    """Switch torch-xla to SPMD mode once, before any XLA tensor is made."""
    global _spmd
    if _spmd:
        return
    try:
        import torch_xla  # noqa: F401
        import torch_xla.runtime as xr
    except ImportError as e:
        raise ImportError("backend='xla' needs torch-xla: pip install 'named_axes[xla]' "
                          "(torch==2.9.1 with torch-xla==2.9.0)") from e
    if not xr.is_spmd():
        xr.use_spmd()
    _spmd = True


def xla_device() -> torch.device:
    """The XLA (SPMD virtual) device, with SPMD mode on."""
    ensure_spmd()
    import torch_xla

    return torch_xla.device()


def xla_devices() -> list:
    """One :class:`Device` per XLA device the SPMD program spans."""
    ensure_spmd()
    import torch_xla.runtime as xr

    return [Device(i, "xla", 0) for i in range(xr.global_runtime_device_count())]
