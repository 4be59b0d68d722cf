"""Sharded values that live across calls: ``NamedSharding`` and the ways to make them.

A :class:`NamedSharding` names the mesh axes that split each dim of a value (JAX's
``NamedSharding(mesh, PartitionSpec(...))``), per dim or, like ``axis_resources``, per
logical axis (``{'batch': 'dp'}``, the dims named by ``axes=`` or a NamedTensor's names).
Under torch.distributed a sharded value is a ``DTensor`` over the mesh's ``DeviceMesh``;
each rank holds only its shard.  See docs/parallelism.md, "Sharded values that live across
steps".

>>> import torch, named_axes as nx
>>> from named_axes.parallel import counter_normal
>>> full = counter_normal(0, (4, 6))
>>> torch.equal(full[2:4, 3:6], counter_normal(0, (4, 6), (slice(2, 4), slice(3, 6))))
True
>>> nx.make_array_from_callback((4, 6), None, lambda idx: counter_normal(0, (4, 6), idx)).shape
torch.Size([4, 6])
"""
from __future__ import annotations

from math import pi, prod
from typing import Any, Callable, Hashable, Mapping, Sequence

import torch

from .._errors import AxisResourceError, AxisSizeError, AxisSpecError, AxisTypeError
from .._parsing import _leaves, match_prefix, path_str
from .._tensor import NamedTensor
from .._torch_private import tree_map
from . import _devices
from ._dtensor_comms import FromLocal, device_mesh, rewrap
from ._mesh import Mesh

__all__ = ["PartitionSpec", "NamedSharding", "make_array_from_process_local_data",
           "make_array_from_callback", "counter_normal", "counter_uniform", "shard_put",
           "sharding_of", "device_put"]


class PartitionSpec(tuple):
    """Per dim of a value: ``None`` (replicated), a mesh axis, or a tuple of mesh axes
    (split major to minor).  ``PartitionSpec('dp', None)``, as in JAX."""

    def __new__(cls, *entries: Any) -> "PartitionSpec":
        return super().__new__(cls, entries)

    def __repr__(self) -> str:
        return f"PartitionSpec{tuple.__repr__(self)}"


def _as_axes(entry: Any, what: str) -> tuple:
    if entry is None:
        return ()
    items = tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
    for a in items:
        if a is None or not isinstance(a, Hashable):
            raise AxisTypeError(f"{what}: {entry!r} is not a mesh axis name, a tuple of them, "
                                f"or None")
    return items


class NamedSharding:
    """How a value is split over a :class:`Mesh`: the mesh, plus the mesh axes of each dim.

    Args:
        mesh: the :class:`Mesh`.
        spec: a :class:`PartitionSpec` / tuple (one entry per leading dim), or a dict
            from logical axis names (or int dims) to mesh axes, ``axis_resources`` style.

    Raises:
        AxisResourceError: a mesh axis the mesh does not have, or one used twice.

    >>> import numpy as np, named_axes as nx
    >>> m = nx.Mesh(np.array(nx.devices()).reshape(1, 1), ('dp', 'mp'))
    >>> s = nx.NamedSharding(m, {'batch': 'dp', 'heads': 'mp'})
    >>> s.dim_spec(3, names=('batch', None, 'heads'))
    (('dp',), (), ('mp',))
    >>> s.placements(3, names=('batch', None, 'heads'))
    ['Shard(0)', 'Shard(2)']
    >>> nx.NamedSharding(m, nx.PartitionSpec(None, 'mp')).dim_spec(3)
    ((), ('mp',), ())
    """

    def __init__(self, mesh: Any, spec: Any = ()) -> None:
        if not isinstance(mesh, Mesh):
            raise AxisTypeError(f"NamedSharding: {mesh!r} is not an nx.Mesh")
        self.mesh = mesh
        if isinstance(spec, Mapping):
            self.by_name = {k: _as_axes(v, f"NamedSharding spec[{k!r}]") for k, v in spec.items()}
            self.by_dim = None
            used = [a for v in self.by_name.values() for a in v]
        elif isinstance(spec, (tuple, list)):
            self.by_dim = tuple(_as_axes(v, f"NamedSharding spec[{i}]") for i, v in enumerate(spec))
            self.by_name = None
            used = [a for v in self.by_dim for a in v]
        else:
            raise AxisTypeError(f"NamedSharding: spec {spec!r} must be a PartitionSpec/tuple (per "
                                f"dim) or a dict (logical axis -> mesh axes)")
        self.spec = spec
        for a in used:
            if a not in mesh.shape:
                raise AxisResourceError(f"NamedSharding({mesh!r}, {spec!r}): mesh axis {a!r} is "
                                        f"not in the mesh (mesh axes: {mesh.shape})")

    def __repr__(self) -> str:
        return f"NamedSharding({self.mesh!r}, {self.spec!r})"

    def dim_spec(self, ndim: int, names: Sequence | None = None, what: str = "a value") -> tuple:
        """Per dim (``ndim`` of them): the mesh axes splitting it.  ``names`` gives each
        dim's logical axis name (None for unnamed dims), for a dict spec."""
        if self.by_dim is not None:
            if len(self.by_dim) > ndim:
                raise AxisSpecError(f"{what}: {self!r} has {len(self.by_dim)} entries but the "
                                    f"value has {ndim} dims")
            out = self.by_dim + ((),) * (ndim - len(self.by_dim))
        else:
            names = tuple(names) if names is not None else (None,) * ndim
            out = tuple(self.by_name.get(n, ()) if n is not None else self.by_name.get(d, ())
                        for d, n in enumerate(names))
        seen: dict = {}
        order = list(self.mesh.axis_names)
        for d, axes in enumerate(out):
            for a in axes:
                if a in seen:
                    raise AxisResourceError(
                        f"{what}: {self!r} splits dims {seen[a]} and {d} "
                        f"({_dim_label(names, seen[a])} and {_dim_label(names, d)}) over the same "
                        f"mesh axis {a!r}; one mesh axis splits at most one dim")
                seen[a] = d
            if [order.index(a) for a in axes] != sorted(order.index(a) for a in axes):
                raise AxisResourceError(
                    f"{what}: {self!r} splits dim {d} over {axes!r}, against the mesh's axis "
                    f"order {tuple(order)!r}; list them in mesh order")
        return out

    def placements(self, ndim: int, names: Sequence | None = None, what: str = "a value",
                   *, as_str: bool = True) -> list:
        """Per mesh axis (mesh order): ``Shard(d)`` or ``Replicate()`` (as strings by default)."""
        spec = self.dim_spec(ndim, names, what)
        where = {a: d for d, axes in enumerate(spec) for a in axes}
        if as_str:
            return [f"Shard({where[a]})" if a in where else "Replicate()"
                    for a in self.mesh.axis_names]
        from torch.distributed.tensor import Replicate, Shard

        return [Shard(where[a]) if a in where else Replicate() for a in self.mesh.axis_names]

    def shards(self, spec_entry: tuple) -> int:
        return prod(self.mesh.shape[a] for a in spec_entry)

    def local_index(self, shape: Sequence[int], names: Sequence | None = None) -> tuple:
        """The global index (tuple of slices) of the shard this rank holds, for a value of
        ``shape`` whose dims are named ``names``: what this process passes to
        :func:`make_array_from_process_local_data`."""
        return self.index(shape, _coords(self), names, "local_index")

    def index(self, shape: Sequence[int], coords: Mapping, names: Sequence | None = None,
              what: str = "a value") -> tuple:
        """The global index (tuple of slices) of the shard at mesh ``coords`` (axis -> int)."""
        spec = self.dim_spec(len(shape), names, what)
        out = []
        for d, (n, axes) in enumerate(zip(shape, spec)):
            k = self.shards(axes)
            if n % k:
                detail = " * ".join(f"{a!r}: {self.mesh.shape[a]}" for a in axes)
                raise AxisSizeError(
                    f"{what}: dim {d} ({_dim_label(names, d)}) has size {n}, which is not "
                    f"divisible by {k}, the size of the mesh axes splitting it ({detail})")
            j = 0
            for a in axes:
                j = j * self.mesh.shape[a] + int(coords[a])
            out.append(slice(j * (n // k), (j + 1) * (n // k)))
        return tuple(out)


def _dim_label(names, d) -> str:
    if names is not None and d < len(names) and names[d] is not None:
        return f"axis {names[d]!r}"
    return f"dim {d}"


# -- which dims are which: `axes=` (in_axes style) or a NamedTensor's names ----------------
def _leaf_names(leaf: Any, mapping: Any, what: str) -> tuple | None:
    """Per physical dim of ``leaf``: its logical name or None."""
    own = tuple(leaf._names) if isinstance(leaf, NamedTensor) else ()
    names = list(own) + [None] * leaf.dim()
    if mapping is not None:
        for pos, name in mapping.resolve(leaf.dim(), what=what):
            names[len(own) + pos] = name
    return tuple(names)


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, (tuple, list, dict))


def _pairs(tree: Any, axes: Any, what: str) -> list:
    """``[(path, leaf, mapping or None)]`` over the leaves of ``tree`` (tuples, lists and
    dicts are containers), ``axes`` an in_axes-style pytree prefix of it."""
    if axes is None:
        return [(p, x, None) for p, x in _leaves(tree, _is_leaf, ())]
    return match_prefix(axes, tree, _is_leaf, what=what)


def _map_tensors(tree: Any, axes: Any, what: str, fn: Callable) -> Any:
    """``tree`` with each tensor leaf ``x`` made ``fn(data, names, where)`` (its data,
    its dims' names per ``axes`` or its own, and how to name it in errors), names kept."""
    it = iter(_pairs(tree, axes, what))

    def go(t):
        if isinstance(t, dict):
            return type(t)((k, go(v)) for k, v in t.items())
        if not _is_leaf(t):
            items = [go(v) for v in t]
            return type(t)(*items) if hasattr(t, "_fields") else type(t)(items)
        path, leaf, mapping = next(it)
        if not isinstance(leaf, (torch.Tensor, NamedTensor)):
            return leaf
        where = f"{what}: {_path(path)}"
        return rewrap(leaf, fn(_data(leaf), _leaf_names(leaf, mapping, where), where))

    return go(tree)


def _path(path) -> str:
    return path_str(tuple(path)) if path else "the value"


def _coords(sharding: NamedSharding) -> dict:
    dm = device_mesh(sharding.mesh)
    coord = dm.get_coordinate()
    if coord is None:
        raise AxisResourceError(f"{sharding!r}: this rank is not in the mesh")
    return dict(zip(sharding.mesh.axis_names, coord))


def _from_local(local: torch.Tensor, sharding: NamedSharding, names, shape, requires_grad):
    """A new DTensor leaf of global ``shape`` from this rank's shard ``local``."""
    place = sharding.placements(len(shape), names, as_str=False)
    dt = FromLocal.apply(local.detach(), device_mesh(sharding.mesh), tuple(place), tuple(shape))
    return dt.requires_grad_(requires_grad)


def _data(leaf: Any) -> torch.Tensor:
    return leaf._data if isinstance(leaf, NamedTensor) else torch.as_tensor(leaf)


def device_put(x: Any, device: Any = None, *, axes: Any = None) -> Any:
    """Move every tensor in ``x`` (a pytree) to ``device`` (default: the first local device).

    NamedTensors keep their names.  Returns tensors of torch's own kinds.  With an
    ``nx.NamedSharding`` as ``device``, every rank keeps only its shard of ``x`` (the same
    full value on every rank; nothing is sent) and gets a DTensor; ``axes`` (an
    ``in_axes``-style mapping, a pytree prefix of ``x``) names the dims for a dict spec.

    >>> import torch, named_axes as nx
    >>> nx.device_put(nx.named(torch.ones(2, 3), 'b ...')).named_shape
    {'b': 2}
    """
    if isinstance(device, NamedSharding):
        if device.mesh.size == 1 and not _devices.dist_initialized():
            return x   # one device: nothing to split
        return shard_put(x, device, axes)
    if axes is not None:
        raise AxisTypeError("device_put: axes= names dims for an nx.NamedSharding; got device "
                            f"{device!r}")
    dev = _devices.target(device) or _devices.local_devices()[0].torch_device

    def put(v):
        if isinstance(v, (torch.Tensor, NamedTensor)):
            return rewrap(v, _data(v).to(dev))
        return torch.as_tensor(v, device=dev) if type(v).__module__ == "numpy" else v

    return tree_map(put, x)


def shard_put(x: Any, sharding: NamedSharding, axes: Any = None) -> Any:
    """``nx.device_put(x, sharding, axes=...)``: every tensor leaf of ``x`` (a full value,
    the same on every rank) -> this rank's shard, as a DTensor (nothing is sent).
    ``requires_grad`` is kept (the result is a new leaf)."""
    def put(data, names, what):
        if type(data).__name__ == "DTensor":
            data = data.full_tensor()
        idx = sharding.index(tuple(data.shape), _coords(sharding), names, what)
        return _from_local(data.detach()[idx], sharding, names, tuple(data.shape),
                           data.requires_grad)

    return _map_tensors(x, axes, "device_put", put)


def make_array_from_process_local_data(sharding: NamedSharding | None, local_data: Any,
                                       global_shape: Sequence[int] | None = None, *,
                                       axes: Any = None) -> Any:
    """A sharded value from each process's own shard (JAX's function of that name).

    ``local_data`` (a tensor, NamedTensor or pytree of them) is this rank's shard: its
    slice along every dim split over the mesh, whole along the others (ranks that differ
    only along mesh axes that split nothing pass equal data; that is not checked).  The
    global shape is the local one times the number of shards of each dim, or
    ``global_shape`` (checked).  With ``sharding=None`` (one process, no mesh) the data
    is returned as it is.
    """
    if sharding is None:
        return local_data
    what = "make_array_from_process_local_data"
    if global_shape is not None and len(_pairs(local_data, axes, what)) != 1:
        raise AxisSpecError("make_array_from_process_local_data: global_shape is for a single "
                            "tensor; leave it out for a pytree")

    def put(data, names, what):
        spec = sharding.dim_spec(data.dim(), names, what)
        shape = tuple(n * sharding.shards(a) for n, a in zip(data.shape, spec))
        if global_shape is not None and tuple(global_shape) != shape:
            raise AxisSizeError(f"{what}: local shape {tuple(data.shape)} split per {sharding!r} "
                                f"makes global shape {shape}, not global_shape "
                                f"{tuple(global_shape)}")
        return _from_local(data, sharding, names, shape, data.requires_grad)

    return _map_tensors(local_data, axes, what, put)


def make_array_from_callback(shape: Sequence[int], sharding: NamedSharding | None,
                             data_callback: Callable, *, names: Sequence | None = None) -> Any:
    """A sharded value made shard by shard: ``data_callback(index)`` returns the data at
    ``index`` (a tuple of slices into the global value of ``shape``) for this rank's shard
    (JAX's function of that name).  ``names`` names the dims for a dict spec.  With
    ``sharding=None`` the callback is asked for the whole value."""
    shape = tuple(int(s) for s in shape)
    if sharding is None:
        return data_callback(tuple(slice(0, n) for n in shape))
    what = "make_array_from_callback"
    idx = sharding.index(shape, _coords(sharding), names, what)
    local = data_callback(idx)
    want = tuple(s.stop - s.start for s in idx)
    if tuple(local.shape) != want:
        raise AxisSizeError(f"{what}: the callback returned shape {tuple(local.shape)} for index "
                            f"{idx}, expected {want}")
    return _from_local(local, sharding, names, shape, local.requires_grad)


def sharding_of(x: Any) -> str:
    """A readable layout of a value: its DTensor placements, or 'full (not sharded)'."""
    data = getattr(x, "_data", x)
    if type(data).__name__ == "DTensor":
        return f"{list(map(str, data.placements))} over mesh {data.device_mesh.mesh_dim_names}"
    return "full (not sharded)"


# -- a counter-based generator: value i depends only on (seed, global index i) -------------
_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in [0, 2**32), without int64 overflow."""
    hi = (((x >> 16) * c) & 0xFFFF) << 16
    return (hi + (x & 0xFFFF) * c) & _M32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (a well-mixing 32-bit integer hash), on int64 tensors in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _linear_index(shape: Sequence[int], index: tuple | None) -> torch.Tensor:
    shape = tuple(int(s) for s in shape)
    index = tuple(index or ())
    index += tuple(slice(0, n) for n in shape[len(index):])   # the rest: whole
    strides = [prod(shape[d + 1:]) for d in range(len(shape))]
    lin = torch.zeros((), dtype=torch.int64)
    for d, (sl, n) in enumerate(zip(index, shape)):
        start, stop, step = sl.indices(n)
        r = torch.arange(start, stop, step, dtype=torch.int64) * strides[d]
        lin = lin.unsqueeze(-1) + r
    return lin


def _bits(seed: int, lin: torch.Tensor, stream: int) -> torch.Tensor:
    key = _hash32(torch.tensor((int(seed) * 2 + stream) & _M32, dtype=torch.int64))
    key2 = _hash32(key ^ ((int(seed) >> 31) & _M32))
    h = _hash32((lin & _M32) ^ key)
    return _hash32(h ^ ((lin >> 32) & _M32) ^ key2)


def _uniform(seed: int, lin: torch.Tensor, stream: int, offset: float) -> torch.Tensor:
    return (_bits(seed, lin, stream).to(torch.float64) + offset) / 2.0 ** 32


def counter_uniform(seed: int, shape: Sequence[int], index: tuple | None = None, *,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
    """Uniform values in (0, 1) of a value of global ``shape``, at ``index`` (a tuple of
    slices; default everything).  Value ``i`` depends only on ``seed`` and its global
    linear index, so a shard computed alone equals the same slice of the whole."""
    u = _uniform(seed, _linear_index(shape, index), 0, 0.5)
    return u.to(dtype or torch.get_default_dtype())


def counter_normal(seed: int, shape: Sequence[int], index: tuple | None = None, *,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """Standard normal values (Box-Muller over two counter streams); see
    :func:`counter_uniform`."""
    lin = _linear_index(shape, index)
    u1, u2 = _uniform(seed, lin, 0, 0.5), _uniform(seed, lin, 1, 0.0)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * pi * u2)
    return z.to(dtype or torch.get_default_dtype())
