"""Meshes of devices with named axes, and serial loops: the resources of ``axis_resources``.

A :class:`Mesh` names the axes of an n-d array of devices; inside ``with Mesh(...)``
``xmap(axis_resources=...)`` can map named axes to them.  :class:`SerialLoop` is time.

>>> import numpy as np, named_axes as nx
>>> m = nx.Mesh(np.array(nx.local_devices()), ('x',))
>>> m.shape
{'x': 1}
>>> with m:
...     nx.parallel.current_mesh() is m
True
>>> nx.parallel.current_mesh() is None
True
>>> nx.SerialLoop(4)
SerialLoop(chunks=4)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from .._env import enter_resource, exit_resource
from .._errors import AxisResourceError, AxisTypeError
from ._devices import as_device

__all__ = ["Mesh", "mesh", "SerialLoop", "current_mesh"]


@dataclass(frozen=True)
class SerialLoop:
    """The resource "time": an axis mapped to ``SerialLoop(k)`` runs in ``k`` chunks in turn.

    Peak memory of the mapped part of the program falls to about ``1/k``; results do not
    change.  The axis size must be divisible by ``k``.

    >>> SerialLoop(2).chunks
    2
    """

    chunks: int

    def __post_init__(self) -> None:
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or self.chunks < 1:
            raise AxisResourceError(f"SerialLoop({self.chunks!r}): the number of chunks must be "
                                    f"a positive int")


_stack = threading.local()   # .meshes: the meshes entered in this thread, outermost first


def current_mesh() -> "Mesh | None":
    """The innermost mesh in scope in this thread, or None."""
    meshes = getattr(_stack, "meshes", None)
    return meshes[-1] if meshes else None


class Mesh:
    """An n-d array of devices whose axes have names (the resources of ``axis_resources``).

    Args:
        devices: a numpy array (or nested sequence) of devices: :class:`Device` objects
            from :func:`named_axes.devices`, ``torch.device`` objects, or int ranks.
        axis_names: one name per array axis, e.g. ``('x', 'y')``.
        outputs: under torch.distributed, what xmap returns: ``'auto'`` (default) full
            tensors on every rank when every input was full, sharded DTensors (laid out
            per the plan) when some input was a DTensor; ``'full'`` always full tensors;
            ``'sharded'`` always DTensors laid out per the plan; ``'dtensor'`` the
            DTensors as computed (partial sums included).
        on_mismatch: a DTensor input whose layout differs from the plan's is
            ``'redistribute'``d (default; counted in ``nx.parallel.comm_summary()``) or
            refused (``'error'``, an AxisResourceError naming the value and both layouts).

    Raises:
        AxisResourceError: when ``len(axis_names)`` differs from the array's rank, a name
            repeats, or a device appears twice.

    >>> import numpy as np, named_axes as nx
    >>> m = nx.Mesh(np.array(nx.local_devices()).reshape(1, 1), ('x', 'y'))
    >>> m.shape, m.size, m.axis_names
    ({'x': 1, 'y': 1}, 1, ('x', 'y'))
    """

    def __init__(self, devices: Any, axis_names: Sequence[Hashable] | Hashable, *,
                 outputs: str = "auto", on_mismatch: str = "redistribute") -> None:
        import numpy as np

        if outputs not in ("auto", "full", "sharded", "dtensor"):
            raise AxisResourceError(f"Mesh(outputs={outputs!r}): expected 'auto' (sharded when "
                                    f"some input is), 'full' (full tensors on every rank), "
                                    f"'sharded' (DTensors per the plan) or 'dtensor' (DTensors "
                                    f"as computed)")
        if on_mismatch not in ("redistribute", "error"):
            raise AxisResourceError(f"Mesh(on_mismatch={on_mismatch!r}): expected "
                                    f"'redistribute' or 'error'")
        self.outputs = outputs
        self.on_mismatch = on_mismatch

        if isinstance(axis_names, str) or not isinstance(axis_names, (tuple, list)):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        arr = np.asarray(devices, dtype=object)
        if arr.ndim != len(axis_names):
            raise AxisResourceError(
                f"Mesh(devices, axis_names={axis_names!r}): devices has {arr.ndim} dims "
                f"(shape {tuple(arr.shape)}) but {len(axis_names)} axis names were given; "
                f"reshape the device array to one dim per name")
        if len(set(axis_names)) != len(axis_names):
            raise AxisResourceError(f"Mesh: repeated mesh axis name in {axis_names!r}")
        if arr.size == 0:
            raise AxisResourceError(f"Mesh(axis_names={axis_names!r}): the device array is empty")
        flat = [as_device(d) for d in arr.reshape(-1)]
        if len(set(flat)) != len(flat):
            raise AxisResourceError(f"Mesh(axis_names={axis_names!r}): a device appears twice in "
                                    f"{[str(d) for d in flat]}")
        platforms = {d.platform for d in flat}
        if len(platforms) > 1:
            raise AxisTypeError(f"Mesh(axis_names={axis_names!r}): devices of several platforms "
                                f"{sorted(platforms)}; a mesh holds devices of one kind")
        self.devices = np.array(flat, dtype=object).reshape(arr.shape)
        self.axis_names: tuple = axis_names
        self.platform: str = flat[0].platform
        self._cache: dict = {}  # engine objects (DeviceMesh, xs.Mesh), built lazily

    def key(self) -> tuple:
        """What makes two meshes run a program alike: platform, axes, devices, options."""
        ids = self.device_ids
        return ("Mesh", self.platform, self.axis_names, ids.shape, ids.tobytes(), self.outputs,
                self.on_mismatch)

    @property
    def shape(self) -> dict:
        """Mesh axis name -> size."""
        return dict(zip(self.axis_names, self.devices.shape))

    @property
    def size(self) -> int:
        return int(self.devices.size)

    @property
    def device_ids(self):
        """The devices' ids as an int numpy array of the mesh's shape."""
        import numpy as np

        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    def __enter__(self) -> "Mesh":
        _stack.__dict__.setdefault("meshes", []).append(self)
        enter_resource(self.key())   # (nx.jit keys its programs by the meshes in scope)
        return self

    def __exit__(self, *exc) -> None:
        _stack.meshes.pop()
        exit_resource()

    def __repr__(self) -> str:
        shape = ", ".join(f"{k!r}: {v}" for k, v in self.shape.items())
        return f"Mesh({{{shape}}}, platform={self.platform!r})"


def mesh(devices: Any, axis_names: Sequence[Hashable], **kwargs: Any) -> Mesh:
    """Alias of :class:`Mesh` (the name the JAX tutorial uses): ``with nx.mesh(devs, ('x',)):``."""
    return Mesh(devices, axis_names, **kwargs)
