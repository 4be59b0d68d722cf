"""The partitioning plan: where each named axis lives, apart from any engine.

From ``axis_resources`` (named axis -> mesh axis, tuple of mesh axes, or
:class:`SerialLoop`), the mesh axis sizes and the named axis sizes, a :class:`Plan` says
which physical dim of a value is split over which mesh axes, and what a collective becomes.
Pure Python: no torch, no devices.  :func:`make_plan` checks the rules of
docs/parallelism.md, "Checks"; :func:`resource_conflicts` gives the pairs of axes that
may never meet in one value.

>>> from named_axes.parallel._plan import make_plan
>>> from named_axes.parallel import SerialLoop
>>> p = make_plan({'batch': 'x', 'hidden': 'y', 'seq': SerialLoop(2)},
...               mesh_shape={'x': 2, 'y': 2}, axis_sizes={'batch': 8, 'hidden': 4, 'seq': 6})
>>> p.spec(('hidden', 'batch'), ndim=1)      # physical dims -> mesh axes splitting them
(('y',), ('x',), ())
>>> p.placements(('hidden', 'batch'), ndim=1)  # per mesh axis: shard which dim
(('x', 1), ('y', 0))
>>> p.local_shape(('batch', 'hidden'), (8, 4, 3))
(4, 2, 3)
>>> p.lowering('psum', 'batch'), p.lowering('psum', 'seq'), p.lowering('psum', 'other')
('all-reduce over mesh axes (x)', 'accumulate over 2 serial chunks', 'local')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from math import prod
from typing import Any, Hashable, Mapping

from .._errors import AxisResourceError, AxisTypeError, fmt_spec, resource_clash_message
from ._mesh import SerialLoop

__all__ = ["Plan", "make_plan", "resource_conflicts", "normalize_resources"]


def normalize_resources(axis_resources: Mapping) -> tuple[dict, dict]:
    """Split ``axis_resources`` into ``{name: (mesh axes...)}`` and ``{name: chunks}``.

    Raises:
        AxisTypeError: a resource that is neither a mesh axis name, a tuple of them,
            nor a :class:`SerialLoop`.
        AxisResourceError: one mesh axis listed twice for one name, or two serial loops
            for one name.
    """
    mesh_axes: dict = {}
    loops: dict = {}
    for name, res in axis_resources.items():
        if isinstance(res, SerialLoop):
            loops[name] = res.chunks
            continue
        items = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        serial = [r for r in items if isinstance(r, SerialLoop)]
        if len(serial) > 1:
            raise AxisResourceError(
                f"axis_resources[{name!r}] = {res!r}: one SerialLoop per named axis "
                f"(SerialLoop({prod(r.chunks for r in serial)}) has as many chunks)")
        if serial:   # JAX's ('x', 'l'): the loop runs chunks, each split over the mesh
            loops[name] = serial[0].chunks
            items = tuple(r for r in items if not isinstance(r, SerialLoop))
        for r in items:
            if not isinstance(r, Hashable) or r is None or hasattr(r, "shape"):
                raise AxisTypeError(
                    f"axis_resources[{name!r}] = {fmt_spec(res)}: {fmt_spec(r)} is not a mesh "
                    f"axis name (expected a mesh axis name, a tuple of them, or "
                    f"nx.SerialLoop(n))")
        if len(set(items)) != len(items):
            raise AxisResourceError(
                f"axis_resources[{name!r}] = {res!r}: a mesh axis is listed twice")
        if items:
            mesh_axes[name] = items
    return mesh_axes, loops


def resource_conflicts(axis_resources: Mapping) -> frozenset:
    """Pairs of named axes mapped to a common mesh axis: they may never meet in one value.

    Serial loops are per-axis and never conflict.

    >>> sorted(sorted(p) for p in resource_conflicts({'a': 'x', 'b': ('x', 'y'), 'c': 'y', 'd': 'z'}))
    [['a', 'b'], ['b', 'c']]
    """
    owners: dict = {}
    for name, res in axis_resources.items():
        for r in (tuple(res) if isinstance(res, (tuple, list)) else (res,)):
            if isinstance(r, Hashable) and not isinstance(r, SerialLoop):
                owners.setdefault(r, []).append(name)
    return frozenset(frozenset(pair) for names in owners.values()
                     for pair in combinations(names, 2) if pair[0] != pair[1])


@dataclass(frozen=True)
class Plan:
    """Where each named axis lives; see the module docstring.

    Attributes:
        mesh_axes: named axis -> tuple of mesh axes splitting it (major to minor).
        loops: named axis -> number of serial chunks.
        mesh_shape: mesh axis -> size (empty without a mesh).
        axis_sizes: named axis -> logical size.
    """

    mesh_axes: Mapping = field(default_factory=dict)
    loops: Mapping = field(default_factory=dict)
    mesh_shape: Mapping = field(default_factory=dict)
    axis_sizes: Mapping = field(default_factory=dict)
    resources: Mapping = field(default_factory=dict)

    @property
    def mesh_axis_names(self) -> tuple:
        return tuple(self.mesh_shape)

    @property
    def uses_mesh(self) -> bool:
        """True when some named axis is split over a mesh axis of size > 1."""
        return any(self.mesh_shape[a] > 1 for axes in self.mesh_axes.values() for a in axes)

    def check_value(self, names: tuple, what: str = "a value") -> None:
        """Raise if two axes sharing a mesh axis both appear in ``names``."""
        seen: dict = {}
        for n in names:
            for a in self.mesh_axes.get(n, ()):
                if a in seen and seen[a] != n:
                    raise AxisResourceError(resource_clash_message(
                        what, seen[a], n, self.mesh_axes, kind="mesh axis",
                        how=f"axis_resources {_fmt_map(self.resources)}"))
                seen[a] = n

    def spec(self, names: tuple, ndim: int = 0) -> tuple:
        """Per physical dim (``names``, then ``ndim`` positional dims): the mesh axes
        splitting it."""
        self.check_value(names)
        return tuple(tuple(self.mesh_axes.get(n, ())) for n in names) + ((),) * ndim

    def placements(self, names: tuple, ndim: int = 0) -> tuple:
        """Per mesh axis, in mesh order: ``('x', dim)`` if it splits physical ``dim``, else
        ``('x', None)`` (replicated).  A name over several mesh axes is split major (first
        listed) to minor."""
        self.check_value(names)
        where = {}
        for dim, n in enumerate(names):
            for a in self.mesh_axes.get(n, ()):
                where[a] = dim
        return tuple((a, where.get(a)) for a in self.mesh_shape)

    def in_mesh_order(self, name: Hashable) -> bool:
        """Whether ``name``'s mesh axes are listed in mesh order (what DTensor can express)."""
        axes = self.mesh_axes.get(name, ())
        order = [self.mesh_axis_names.index(a) for a in axes]
        return order == sorted(order)

    def shards(self, name: Hashable) -> int:
        """How many pieces axis ``name`` is cut into (mesh axes times serial chunks)."""
        return self.mesh_shards(name) * self.loops.get(name, 1)

    def mesh_shards(self, name: Hashable) -> int:
        """How many ranks axis ``name`` is split over (its mesh axes' sizes)."""
        return prod(self.mesh_shape[a] for a in self.mesh_axes.get(name, ()))

    def local_shape(self, names: tuple, shape: tuple) -> tuple:
        """The per-device (and per-chunk) shape of a value with physical ``shape``."""
        out = list(shape)
        for dim, n in enumerate(names):
            out[dim] //= self.shards(n)
        return tuple(out)

    def lowering(self, op: str, axis_names: Any) -> str:
        """What collective ``op`` over ``axis_names`` becomes under this plan (for docs/graphs)."""
        names = axis_names if isinstance(axis_names, tuple) else (axis_names,)
        mesh = [a for n in names for a in self.mesh_axes.get(n, ())]
        loops = [self.loops[n] for n in names if n in self.loops]
        kind = {"psum": "all-reduce", "pmean": "all-reduce", "pmax": "all-reduce(max)",
                "pmin": "all-reduce(min)", "all_gather": "all-gather",
                "psum_scatter": "reduce-scatter", "all_to_all": "all-to-all",
                "ppermute": "collective-permute", "pshuffle": "collective-permute"}.get(op, op)
        parts = []
        if mesh:
            parts.append(f"{kind} over mesh axes ({', '.join(map(str, mesh))})")
        if loops:
            parts.append(f"accumulate over {prod(loops)} serial chunks")
        return " + ".join(parts) or "local"


def _fmt_map(m: Mapping) -> str:
    """``m`` spelled as a dict literal, whatever its mapping type."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in m.items()) + "}"


def make_plan(axis_resources: Mapping, *, mesh_shape: Mapping | None,
              axis_sizes: Mapping, what: str = "xmap") -> Plan:
    """Validate ``axis_resources`` against the mesh and sizes, and build a :class:`Plan`.

    Args:
        axis_resources: named axis -> mesh axis / tuple of mesh axes / SerialLoop.
        mesh_shape: mesh axis -> size of the mesh in scope, or None when there is none.
        axis_sizes: named axis -> size.
        what: how the caller is spelled in error messages.

    Raises:
        AxisResourceError: no mesh in scope, an unknown mesh axis, a size not divisible.

    >>> make_plan({'batch': 'x'}, mesh_shape=None, axis_sizes={'batch': 8})
    Traceback (most recent call last):
    ...
    named_axes._errors.AxisResourceError: xmap: axis_resources {'batch': 'x'} maps axis 'batch' to mesh axis 'x', but no mesh is in scope; call it inside `with nx.Mesh(devices, ('x',)):`
    """
    mesh_axes, loops = normalize_resources(axis_resources)
    res_txt = _fmt_map(axis_resources)
    if mesh_axes and mesh_shape is None:
        name, axes = next(iter(mesh_axes.items()))
        needed = tuple(dict.fromkeys(a for v in mesh_axes.values() for a in v))
        raise AxisResourceError(
            f"{what}: axis_resources {res_txt} maps axis {name!r} to mesh axis "
            f"{axes[0] if len(axes) == 1 else axes!r}, but no mesh is in scope; call it inside "
            f"`with nx.Mesh(devices, {needed!r}):`")
    mesh_shape = dict(mesh_shape or {})
    for name, axes in mesh_axes.items():
        for a in axes:
            if a not in mesh_shape:
                raise AxisResourceError(
                    f"{what}: axis_resources maps axis {name!r} to mesh axis {a!r}, which the mesh "
                    f"in scope does not have (mesh axes: {_fmt_map(mesh_shape)})")
    for name in list(mesh_axes) + list(loops):
        if name not in axis_sizes:
            raise AxisResourceError(
                f"{what}: axis_resources assigns axis {name!r}, which is not defined here "
                f"(defined: {', '.join(map(repr, axis_sizes)) or 'none'})")
    for name, axes in mesh_axes.items():
        n = prod(mesh_shape[a] for a in axes)
        if axis_sizes[name] % n:
            detail = " * ".join(f"{a!r}: {mesh_shape[a]}" for a in axes)
            raise AxisResourceError(
                f"{what}: axis {name!r} has size {axis_sizes[name]}, which is not divisible by "
                f"{n}, the size of the mesh axes it is mapped to ({detail}); pad the axis or "
                f"map it to other mesh axes")
    for name, k in loops.items():
        n = prod(mesh_shape[a] for a in mesh_axes.get(name, ()))
        if name in mesh_axes and axis_sizes[name] % (k * n):
            raise AxisResourceError(
                f"{what}: axis {name!r} has size {axis_sizes[name]}, which is not divisible by "
                f"{k * n}: the {k} chunks of its SerialLoop({k}), each split {n} ways over mesh "
                f"axes {mesh_axes[name]}")
        if axis_sizes[name] % k:
            raise AxisResourceError(
                f"{what}: axis {name!r} has size {axis_sizes[name]}, which is not divisible by "
                f"the {k} chunks of SerialLoop({k}) it is mapped to")
    return Plan(mesh_axes=mesh_axes, loops=loops, mesh_shape=mesh_shape,
                axis_sizes=dict(axis_sizes), resources=dict(axis_resources))
