"""``axis_resources='auto'``: the assignment of named axes to mesh axes a cost model prefers.

Every legal assignment (each named axis on a set of mesh axes whose sizes divide it, two
axes that meet in one value never on one mesh axis) is priced per device -- compute,
communication, memory -- from one abstract trace of the program (:mod:`._cost_trace`);
the fastest that fits ``memory_per_device`` wins, ties going to the simpler assignment.
The model and its limits: docs/parallelism.md, "axis_resources='auto'".

>>> import numpy as np, torch, named_axes as nx
>>> f = nx.xmap(lambda x, w: nx.lax.psum((x @ w).sum(), 'b'), in_axes=(['b', ...], [...]),
...             out_axes=[...])
>>> mesh = nx.Mesh(np.arange(4), ('x',))      # four ranks (priced, not run)
>>> rates = nx.Rates(1e12, 1e11, 1e-5, 1e10, 2e-5)
>>> nx.plan_resources(f, mesh, torch.ones(512, 256), torch.ones(256, 256),
...                   rates=rates).axis_resources
{'b': 'x'}
"""
from __future__ import annotations

import html
import itertools
from dataclasses import dataclass, field
from math import prod
from typing import Any, Mapping

from .._errors import AxisResourceError, AxisTypeError
from .._torch_private import tree_leaves
from ._cost_trace import CostTrace, trace_costs
from ._mesh import Mesh, SerialLoop, current_mesh
from ._plan import _fmt_map
from ._rates import Rates, calibrate

__all__ = ["Candidate", "plan_resources", "price", "candidates", "auto_resources",
           "ResourceReport", "explain_resources"]

# how a collective's backward moves data (psum / pdot transpose to the rank-local Varying)
_BACKWARD = {"all_gather": "reduce_scatter", "psum_scatter": "all_gather",
             "all_to_all": "all_to_all", "ppermute": "permute", "pshuffle": "permute"}
_REDUCES = frozenset({"psum", "pmean", "pmax", "pmin", "pdot", "contract"})


@dataclass(frozen=True)
class Candidate:
    """One assignment and what the model says it costs per step, per device."""

    axis_resources: dict
    time_s: float
    compute_s: float
    comm_s: float
    memory_bytes: int
    collectives: int
    comm_bytes: int
    fits: bool = True
    notes: tuple = field(default=(), compare=False)

    def spelled(self) -> str:
        """The assignment as one would write it (``{}``: every axis on every device)."""
        return _fmt_map(self.axis_resources)


class _Split:
    """How a candidate splits the axes: mesh axes per name, serial chunks per name."""

    def __init__(self, mesh_axes: Mapping, loops: Mapping, mesh_shape: Mapping) -> None:
        self.mesh_axes, self.loops = mesh_axes, loops
        self.shards = {n: prod(mesh_shape[a] for a in axes) for n, axes in mesh_axes.items()}
        self.mesh_shape = mesh_shape

    def share(self, names) -> float:
        """The part of a value (or an op's work) over ``names`` one device holds."""
        return 1.0 / prod(self.shards.get(n, 1) for n in names)

    def over(self, names) -> frozenset:
        """The mesh axes that split any of ``names``."""
        return frozenset(a for n in names for a in self.mesh_axes.get(n, ()))

    def group(self, mesh_axes) -> int:
        return prod(self.mesh_shape[a] for a in mesh_axes)

    def chunks(self, names) -> int:
        return prod(self.loops.get(n, 1) for n in names)


def price(trace: CostTrace, split: _Split, rates: Rates, *, train: bool,
          optimizer_states: int = 2) -> tuple:
    """``(compute s, comm s, collectives, comm bytes, memory bytes)`` of one step."""
    passes = 3 if train else 1   # a backward: twice the forward's work
    splits = any(s > 1 for s in split.shards.values())
    # split over ranks, every op goes through the engine (it hands operands the sums
    # their cotangents need)
    op_s = rates.engine_op_s if splits else rates.op_s
    compute = 0.0
    for key, (flops, nbytes, calls) in trace.work.items():
        names, whole = key if isinstance(key, tuple) else (key, frozenset())
        share = split.share(names - whole)
        compute += passes * (flops * share / rates.flops_per_s + nbytes * share / rates.bytes_per_s)
        compute += passes * calls * split.chunks(names) * op_s
    compute += passes * _kept_products(trace, split) / rates.bytes_per_s
    comm, count, moved = _comm(trace, split, rates, train)
    if splits:
        comm += rates.mesh_call_s
    return compute, comm, count, moved, _memory(trace, split, train, optimizer_states)


def _kept_products(trace: CostTrace, split: _Split) -> float:
    """Bytes an einsum moves, per pass, where it sums axes a ``SerialLoop`` splits: the
    loop keeps them in its product for the replayed psum (a mesh has no such product)."""
    nbytes = 0.0
    for c in trace.comms:
        chunks = {n: split.loops.get(n, 1) for n in c.axes}
        if c.op != "contract" or all(k == 1 for k in chunks.values()):
            continue
        kept = prod(trace.axis_sizes[n] // (k * split.shards.get(n, 1))
                    for n, k in chunks.items() if k > 1)
        nbytes += 2 * c.out_bytes * split.share(c.out_names) * kept * split.chunks(c.axes)
    return nbytes


def _comm(trace: CostTrace, split: _Split, rates: Rates, train: bool) -> tuple:
    time, count, moved = 0.0, 0, 0.0
    for kind, nbytes, axes in _collectives(trace, split, train):
        # over several mesh axes the engines (and DTensor) run one collective per mesh
        # axis in turn; a gather's pieces grow, a reduce-scatter's shrink, stage by stage
        for a in sorted(axes):
            group = split.group((a,))
            if group > 1:
                time += rates.collective_s(kind, nbytes, group)
                count, moved = count + 1, moved + nbytes
                nbytes *= group if kind in ("all_gather", "edge_gather") else \
                    1 / group if kind == "reduce_scatter" else 1
    return time, count, int(moved)


def _collectives(trace: CostTrace, split: _Split, train: bool):
    """``(kind, bytes per rank, mesh axes)`` of every collective of a step."""
    for c in trace.comms:
        over = split.over(c.axes & c.x_names)
        if not over:
            continue
        if c.op in _REDUCES:
            yield "all_reduce", c.out_bytes * split.share(c.out_names), over
        elif c.op == "whole":   # computed on the gathered whole; its transpose scatters
            yield "all_gather", c.x_bytes * split.share(c.x_names), over
            if train:
                yield "reduce_scatter", c.x_bytes * split.share(c.x_names - c.axes), over
        else:
            kind = {"all_gather": "all_gather", "psum_scatter": "reduce_scatter",
                    "all_to_all": "all_to_all"}.get(c.op, "permute")
            yield kind, c.x_bytes * split.share(c.x_names), over
            if train and c.op in _BACKWARD:
                yield _BACKWARD[c.op], c.out_bytes * split.share(c.out_names), over
    for o_names, nbytes in trace.outputs:   # full results on every rank
        over = split.over(o_names)
        if over:
            yield "all_gather", nbytes * split.share(o_names), over
    if train:
        yield from _gradient_sums(trace, split)
        sharded = trace.sharded + [False] * (len(trace.inputs) - len(trace.sharded))
        for (names, nbytes, grad), dtensor in zip(trace.inputs, sharded):
            over = split.over(names)   # a full input's gradient is gathered whole
            if grad and over and not dtensor:
                yield "edge_gather", nbytes * split.share(names), over


def _gradient_sums(trace: CostTrace, split: _Split):
    """The backward's sums where replicated values met split ones: one per value and set
    of mesh axes; the parameters' bucketed per set of mesh axes."""
    seen, buckets = set(), {}
    for m in trace.meets:
        over = split.over(m.union - m.names) - split.over(m.names)
        if not over or (m.key, over) in seen:
            continue
        seen.add((m.key, over))
        nbytes = m.nbytes * split.share(m.names)
        if m.leaf:
            buckets[over] = buckets.get(over, 0.0) + nbytes
        else:
            yield "all_reduce", nbytes, over
    for over, nbytes in sorted(buckets.items(), key=lambda kv: sorted(kv[0])):
        yield "all_reduce", nbytes, over


def _memory(trace: CostTrace, split: _Split, train: bool, optimizer_states: int) -> int:
    held = sum(nbytes * split.share(names) for names, nbytes, _ in trace.inputs)
    params = sum(nbytes * split.share(names) for names, nbytes, grad in trace.inputs if grad)
    saved = sum(nbytes * split.share(names) / (1 if train else split.chunks(names))
                for names, nbytes in trace.saved.items())
    if train:
        held += params * (1 + optimizer_states)
    return int(held + saved)


def candidates(trace: CostTrace, mesh_shape: Mapping, *, loops: bool = False):
    """Every legal assignment: ``(mesh axes per name, chunks per name)``.  Mesh axes of
    size 1 split nothing and are left out; with ``loops``, each assignment again with
    one axis in 2, 4, 8 or 16 serial chunks (where they divide what the mesh leaves)."""
    axes = [a for a, s in mesh_shape.items() if s > 1]
    names = sorted(trace.axis_sizes, key=lambda n: (-trace.axis_sizes[n], str(n)))
    meets = {n: set() for n in names}
    for v in trace.values:
        for a, b in itertools.permutations(v & set(names), 2):
            meets[a].add(b)
    # per name: the sets of mesh axes (in the mesh's order) whose sizes divide it
    options = {n: [sub for r in range(len(axes) + 1) for sub in itertools.combinations(axes, r)
                   if trace.axis_sizes[n] % prod(mesh_shape[a] for a in sub) == 0]
               for n in names}

    def search(i: int, chosen: dict):
        if i == len(names):
            yield {n: m for n, m in chosen.items() if m}
            return
        n = names[i]
        for m in options[n]:
            if any(set(m) & set(chosen[o]) for o in meets[n] if o in chosen):
                continue
            chosen[n] = m
            yield from search(i + 1, chosen)
            del chosen[n]
    for mesh_axes in search(0, {}):
        yield mesh_axes, {}
        for n in names if loops else ():
            left = trace.axis_sizes[n] // prod(mesh_shape[a] for a in mesh_axes.get(n, ()))
            for k in (2, 4, 8, 16):
                if left % k == 0:
                    yield mesh_axes, {n: k}


def _resources(mesh_axes: Mapping, chunks: Mapping) -> dict:
    """The ``axis_resources`` spelling of one assignment."""
    out: dict = {}
    for n in sorted(set(mesh_axes) | set(chunks), key=str):
        parts = tuple(mesh_axes.get(n, ()))
        if n in chunks:
            parts += (SerialLoop(chunks[n]),)
        out[n] = parts[0] if len(parts) == 1 else parts
    return out


def rank(trace: CostTrace, mesh_shape: Mapping, rates: Rates, *, train: bool,
         memory_per_device: float | None = None, optimizer_states: int = 2) -> list:
    """Every legal :class:`Candidate`, best first: those that fit ``memory_per_device``
    by modelled time, then the rest by memory."""
    def run(loops):
        out = []
        for mesh_axes, chunks in candidates(trace, mesh_shape, loops=loops):
            split = _Split(mesh_axes, chunks, mesh_shape)
            compute, comm, count, moved, mem = price(trace, split, rates, train=train,
                                                     optimizer_states=optimizer_states)
            fits = memory_per_device is None or mem <= memory_per_device
            out.append(Candidate(_resources(mesh_axes, chunks), compute + comm, compute,
                                 comm, mem, count, moved, fits))
        return out
    found = run(loops=False)
    if memory_per_device is not None and not train and not any(c.fits for c in found):
        found = run(loops=True)   # (a backward keeps every chunk's activations: no help)
    # ties go to the simpler assignment
    return sorted(found, key=lambda c: (not c.fits, c.time_s if c.fits else c.memory_bytes,
                                        len(c.axis_resources), repr(c.axis_resources)))


def plan_resources(f: Any, mesh: Mesh, *args: Any, memory_per_device: float | None = None,
                   rates: Rates | None = None, train: bool | None = None,
                   optimizer_states: int = 2) -> Candidate:
    """The assignment of ``f``'s named axes to ``mesh``'s axes that the cost model
    prefers for these arguments (see the module docstring).

    Args:
        f: an ``nx.xmap``'d function (its own ``axis_resources`` are ignored).
        mesh: the mesh to plan for (it need not be in scope, or this process's).
        *args: the arguments, or ``nx.ShapeDtypeStruct``s like them (nothing is run).
        memory_per_device: bytes a device may hold (parameters, gradients, optimizer
            state, kept activations); ``None``: no limit.
        rates: the machine's :class:`Rates`; default :func:`nx.calibrate` 's (under
            torch.distributed, measured by every rank together: call this on every rank,
            or give ``rates``).
        train: price a backward and an optimizer step too (default: whether some
            argument requires grad); ``True`` makes every floating argument a parameter.
        optimizer_states: parameter-sized tensors the optimizer keeps (Adam: 2).

    Returns:
        The chosen :class:`Candidate`; its ``axis_resources`` go to ``nx.xmap``.

    Raises:
        AxisResourceError: no legal assignment fits ``memory_per_device`` (the message
            gives the smallest modelled memory).
    """
    return _ranked(f, mesh, args, memory_per_device, rates, train, optimizer_states)[0]


def _ranked(f, mesh, args, memory_per_device, rates, train, optimizer_states) -> list:
    if not hasattr(f, "in_axes") or not hasattr(f, "fun"):
        raise AxisTypeError(f"plan_resources: f must be an nx.xmap'd function, got "
                            f"{type(f).__name__}")
    if not isinstance(mesh, Mesh):
        raise AxisTypeError(f"plan_resources: mesh must be an nx.Mesh, got {type(mesh).__name__}")
    trace = trace_costs(f, args, differentiate=train)
    train = bool(train) if train is not None else any(g for _, _, g in trace.inputs)
    ranked = rank(trace, mesh.shape, rates or calibrate(), train=train,
                  memory_per_device=memory_per_device, optimizer_states=optimizer_states)
    if not ranked[0].fits:
        raise AxisResourceError(
            f"plan_resources: no assignment of axes {sorted(trace.axis_sizes, key=str)} to "
            f"mesh {mesh.shape} fits memory_per_device={memory_per_device:.4g} bytes; the "
            f"smallest modelled step needs {ranked[0].memory_bytes} bytes per device "
            f"({ranked[0].spelled()})")
    return ranked


def auto_resources(xmapped: Any, args: tuple) -> dict:
    """The ``axis_resources`` an ``axis_resources='auto'`` xmap uses for this call's mesh
    and arguments (kept per xmap; every rank computes the same choice)."""
    mesh = current_mesh()
    if mesh is None:
        return {}
    key = (id(mesh), tuple(mesh.shape.items()), tuple(
        (tuple(x.shape), x.dtype, getattr(x, "_names", ()), bool(x.requires_grad))
        if hasattr(x, "shape") and hasattr(x, "dtype") else repr(x) for x in tree_leaves(args)))
    cache = xmapped.__dict__.setdefault("_auto_plans", {})
    if key not in cache:
        cache[key] = plan_resources(xmapped, mesh, *args).axis_resources
    return cache[key]


_COLUMNS = ("axis_resources", "step (model)", "compute", "comm", "collectives",
            "memory/device")


def _seconds(s: float) -> str:
    unit, scale = next((u, k) for u, k in (("s", 1.0), ("ms", 1e-3), ("us", 0.0)) if s >= k)
    return f"{s / (scale or 1e-6):.3g} {unit}"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class ResourceReport:
    """The chosen :class:`Candidate` and the ranked alternatives shown beside it."""

    chosen: Candidate
    candidates: tuple
    mesh_shape: dict

    def rows(self) -> list:
        return [(c.spelled(), _seconds(c.time_s), _seconds(c.compute_s), _seconds(c.comm_s),
                 str(c.collectives), _bytes(c.memory_bytes) + ("" if c.fits else " (over)"))
                for c in self.candidates]

    def __str__(self) -> str:
        rows = [_COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
        lines = []
        for k, r in enumerate(rows):
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
            mark = "   <- chosen" if k == 1 else ""
            lines.append("  ".join(cells) + mark)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr{}>".format(' style="font-weight:bold"' if k == 0 else "")
            + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
            for k, r in enumerate(self.rows()))
        return (f"<table><caption>axis_resources on mesh {html.escape(str(self.mesh_shape))}"
                f" (first: chosen)</caption><tr>{head}</tr>{body}</table>")


def explain_resources(f: Any, mesh: Mesh, *args: Any, top: int = 5,
                      memory_per_device: float | None = None, rates: Rates | None = None,
                      train: bool | None = None, optimizer_states: int = 2) -> ResourceReport:
    """What :func:`nx.plan_resources` chooses and the ``top - 1`` best alternatives,
    with their modelled step time, compute, communication, collectives and memory per
    device (its ``str`` is a table, Jupyter shows it as html).  Arguments as
    :func:`nx.plan_resources`.

    >>> import numpy as np, torch, named_axes as nx
    >>> f = nx.xmap(lambda x, w: nx.lax.psum((x @ w).sum(), 'b'), in_axes=(['b', ...], [...]),
    ...             out_axes=[...])
    >>> print(nx.explain_resources(f, nx.Mesh(np.arange(4), ('x',)), torch.ones(512, 256),
    ...       torch.ones(256, 256), rates=nx.Rates(1e12, 1e11, 1e-5, 1e10, 2e-5)))
    ... # doctest: +NORMALIZE_WHITESPACE
    axis_resources  step (model)  compute   comm  collectives  memory/device
    {'b': 'x'}           71.4 us  51.4 us  20 us            1      512.5 KiB   <- chosen
    {}                    115 us   115 us   0 us            0        1.3 MiB
    """
    ranked = _ranked(f, mesh, args, memory_per_device, rates, train, optimizer_states)
    return ResourceReport(ranked[0], tuple(ranked[:max(top, 1)]), dict(mesh.shape))
