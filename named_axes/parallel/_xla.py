"""The torch-xla SPMD engine: one controller, XLA's partitioner does the splitting.

Inputs are moved to the XLA device and annotated with ``xs.mark_sharding`` over an
``xs.Mesh`` built from the :class:`Mesh`, with a partition spec from the plan (each
named dim split over its mesh axes, in the order listed); XLA's SPMD partitioner
propagates shardings and inserts the collectives (an all-reduce for a contraction
over a split axis).  Outputs are computed as one graph (:func:`run_graph`, which also
steers clear of torch-xla's graph-cache collisions) and come back to the inputs'
device, as full tensors; an input copied to XLA and written in place is written back.
A random op draws what the vectorized run draws: inputs on the CPU, from the CPU
generator (on host copies of its XLA values); inputs on XLA, from XLA's.

torch-xla must be in SPMD mode before any XLA tensor exists (afterwards a training
step can crash), so every path into XLA here goes through :func:`ensure_spmd` first.
Install with ``pip install named_axes[xla]`` (``torch==2.9.1``, ``torch-xla==2.9.0``);
on CPU, ``PJRT_DEVICE=CPU CPU_NUM_DEVICES=4`` gives four devices.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .._draws import draws
from .._engine import EngineBase
from .._errors import AxisResourceError
from .._tensor import NamedTensor, data_and_names
from .._torch_private import (disable_dispatch_modes, dispatch_depth, dispatch_modes,
                              functorch_unwrapped, is_functorch_wrapped, tensor_version,
                              tree_flatten, tree_unflatten, xla_graph_runtime)
from ._devices import ensure_spmd, xla_device, xla_devices
from ._dtensor_comms import rewrap

__all__ = ["ensure_spmd", "xla_device", "xla_devices", "XlaEngine", "xla_mesh"]


def xla_mesh(m) -> Any:
    """The ``torch_xla.distributed.spmd.Mesh`` of a :class:`Mesh` (built once)."""
    xm = m._cache.get("xla_mesh")
    if xm is None:
        n = len(xla_devices())
        if m.device_ids.size != n:   # (torch-xla's SPMD program spans every device)
            raise AxisResourceError(
                f"the torch-xla engine needs a mesh over all {n} XLA devices (its SPMD "
                f"program spans every device), got {m!r}: give every device a mesh position")
        import torch_xla.distributed.spmd as xs

        # torch-xla rebuilds a mesh from its text (ast.literal_eval): names it can read back
        names = tuple(m.axis_names)
        if not all(type(n) is str for n in names):
            names = tuple(f"axis{i}" for i in range(len(names)))
        xm = xs.Mesh(m.device_ids.reshape(-1), tuple(m.devices.shape), names)
        m._cache["xla_mesh"] = xm
    return xm


def _unwatched() -> Any:
    """Where the library's keeper of written tensors is the only dispatch mode (a
    ``SerialLoop``'s ChunkWrites, marked ``unseen``): a context without it, for calls that
    only make new XLA tensors (a move onto XLA, a factory's); else no change.

    A dispatch mode runs each op with torch's functionalization off, so an XLA tensor made
    under one lacks torch-xla's functional wrapper: its views are copies, and a write
    through one (``u[0] = -1`` into an input) is lost, the version counter bumped all the
    same.  (Such a call writes no tensor the keeper would keep.)

    >>> from named_axes._torch_private import dispatch_depth
    >>> from named_axes.parallel._serial_chunks import ChunkWrites
    >>> with ChunkWrites([], ()), _unwatched():
    ...     dispatch_depth()
    0
    """
    if dispatch_depth() and all(getattr(m, "unseen", False) for m in dispatch_modes()):
        return disable_dispatch_modes()
    return contextlib.nullcontext()


class XlaEngine(EngineBase):
    """Runs a named program on XLA tensors annotated with the plan's shardings."""

    def __init__(self, plan, mesh) -> None:
        if mesh.platform != "xla":
            raise AxisResourceError(f"the torch-xla engine needs a mesh of XLA devices "
                                    f"(nx.devices('xla')), got {mesh!r}")
        self.plan = plan
        self.mesh = mesh
        self.xmesh = xla_mesh(mesh)
        self.device = xla_device()
        self.home: torch.device | None = None

    def to_xla(self, leaf: Any, what: str) -> Any:
        import torch_xla.distributed.spmd as xs

        pair = data_and_names(leaf)
        if pair is None:
            return leaf
        data, names = pair
        self.plan.check_value(names, what)
        if self.home is None:
            self.home = data.device
        if data.device.type != "xla":
            data = data.to(self.device)
        # per physical dim: None, a mesh dim, or a tuple of them (major to minor), by index
        # (a mesh axis name need not be a string: nx.pmap's is not)
        dim = {n: i for i, n in enumerate(self.mesh.axis_names)}
        spec = tuple(None if not axes else dim[axes[0]] if len(axes) == 1
                     else tuple(dim[a] for a in axes)
                     for axes in self.plan.spec(names, data.dim() - len(names)))
        # (a value a torch.func transform around the xmap wraps runs unannotated:
        # torch-xla shards plain XLA tensors only, and the partitioner replicates it)
        if any(s is not None for s in spec) and not is_functorch_wrapped(data):
            if data.requires_grad and hasattr(xs, "mark_sharding_with_gradients"):
                data = xs.mark_sharding_with_gradients(data, self.xmesh, spec)
            else:
                xs.mark_sharding(data, self.xmesh, spec)
        return rewrap(leaf, data)

    def resume_here(self) -> Callable:
        """For code autograd runs later (a checkpoint's recomputation): CPU tensors it
        meets are moved to XLA, and random ops drawn, as in the run (:class:`_Replicating`)."""
        host = self._host()
        return lambda: _Replicating(self.device, host)

    def _host(self) -> torch.device | None:
        """The inputs' device where it is not XLA's: the vectorized run draws there."""
        return self.home if self.home is not None and self.home.type != "xla" else None

    def back(self, leaf: Any) -> Any:
        pair = data_and_names(leaf)
        home = self.home
        if pair is None or home is None or home.type == "xla" or pair[0].device.type != "xla":
            return leaf
        return rewrap(leaf, pair[0].to(home))

    def run(self, body: Callable, leaves: list, engine: Any = None) -> list:
        self.home = None
        with _unwatched():
            xleaves = [self.to_xla(x, f"argument leaf {i}") for i, x in enumerate(leaves)]
        copies = []   # inputs copied to XLA: a write into one goes back after the run
        for x, y in zip(leaves, xleaves):
            d, c = data_and_names(x), data_and_names(y)
            if d is not None and c[0] is not d[0]:
                copies.append((d[0], c[0], tensor_version(c[0])))
        with _Replicating(self.device, self._host()):
            outs = body(xleaves, engine=engine if engine is not None else self)
        written = [(d, c) for d, c, v in copies if tensor_version(c) != v]
        memory = [_address(d) for d, _, _ in copies] if written else []
        for d, _ in written:
            if memory.count(_address(d)) > 1:
                raise AxisResourceError(
                    f"the torch-xla engine: an input of shape {tuple(d.shape)} is written in "
                    f"place and shares memory with another input; each goes to XLA as its "
                    f"own copy, so the other would not see the write: pass a copy (x.clone())")
        with _unwatched():
            run_graph([o._data if isinstance(o, NamedTensor) else o for o in outs]
                      + [c for _, c in written], self.device)
        for d, c in written:
            d.copy_(c.to(d.device))
        return [self.back(o) for o in outs]


def _address(t: torch.Tensor) -> int:
    """The address of a host tensor's memory (through torch.func's wrappers)."""
    return functorch_unwrapped(t).untyped_storage().data_ptr()


class _Replicating(TorchFunctionMode):
    """While a program runs on XLA: a CPU tensor that meets XLA values in a torch call (a
    closed-over weight, a tensor made inside the program) is moved to XLA first, whole
    on every device, as the vectorized run reads it; not the target of an in-place op or
    ``out=`` (a write into a copy would be lost: torch refuses the mixed devices).  Such
    moves, and calls naming the XLA device (a factory's ``device=``), run
    :func:`_unwatched`.  With ``host`` (the inputs' device, not XLA), a random op on XLA
    values is drawn there (:meth:`_drawn_on_host`)."""

    def __init__(self, device: torch.device, host: torch.device | None = None) -> None:
        super().__init__()
        self.device, self.host = device, host

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        pairs = [data_and_names(v) for v in flat]
        name = getattr(func, "__name__", "")
        on_xla = any(p is not None and p[0].device.type == "xla" for p in pairs)
        if self.host is not None and draws(func) is True and (
                on_xla or any(map(_is_xla_device, flat))):
            return self._drawn_on_host(func, flat, pairs, spec)
        kept = 1 if name.endswith("_") and (name[:3] == "__i" or name[:2] != "__"
                                             or name == "__setitem__") else 0
        if on_xla:
            moved = [i for i, (v, p) in enumerate(zip(flat, pairs)) if i >= kept and p is not None
                     and p[0].device.type == "cpu" and v is not kwargs.get("out")]
            if moved:
                moving = list(flat)
                with _unwatched():
                    for i in moved:
                        moving[i] = rewrap(flat[i], pairs[i][0].to(self.device))
                args, kwargs = tree_unflatten(moving, spec)
            if self.host is not None and draws(func) is not False:   # (it may draw)
                return self._unless_drawn(func, args, kwargs, (flat, pairs, spec))
        elif not kept and "out" not in kwargs and any(_is_xla_device(v) for v in flat):
            with _unwatched():   # (a factory's XLA tensor, as a moved one)
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _unless_drawn(self, func: Callable, args: tuple, kwargs: dict, asked: tuple) -> Any:
        """``func(*args, **kwargs)`` on XLA values; where it drew from XLA's generator though
        not named a random op (sdpa's ``dropout_p``, a module's dropout inside one call),
        drawn again on the host (:meth:`_drawn_on_host` of the call as ``asked``), XLA's
        generator given its state back."""
        import torch_xla.core.xla_model as xm

        before = xm.get_rng_state()
        out = func(*args, **kwargs)
        if xm.get_rng_state() == before:
            return out
        xm.set_rng_state(before)
        return self._drawn_on_host(func, *asked)

    def _drawn_on_host(self, func: Callable, flat: list, pairs: list, spec: Any) -> Any:
        """``func``, a random op, on host copies of its XLA values (an XLA device named:
        the host), from the host's generator, as the vectorized run draws it (XLA's
        generator draws other numbers); its results moved onto XLA, an XLA tensor it
        writes in place (``x.bernoulli_()``, ``inplace=True``) given the drawn values."""
        host = [rewrap(v, p[0].to(self.host)) if p is not None and p[0].device.type == "xla"
                else self.host if _is_xla_device(v) else v for v, p in zip(flat, pairs)]
        args, kwargs = tree_unflatten(host, spec)
        out = func(*args, **kwargs)
        if (getattr(func, "__name__", "").endswith("_") or kwargs.get("inplace") is True) \
                and pairs[0] is not None and pairs[0][0].device.type == "xla":
            with _unwatched():
                drawn = data_and_names(host[0])[0].to(self.device)
            pairs[0][0].copy_(drawn)   # (the caller's XLA tensor, written as asked)
            return flat[0]
        out_flat, out_spec = tree_flatten(out)
        with _unwatched():
            out_flat = [rewrap(v, p[0].to(self.device)) if (p := data_and_names(v)) is not None
                        and p[0].device.type != "xla" else v for v in out_flat]
        return tree_unflatten(out_flat, out_spec)


def _is_xla_device(v: Any) -> bool:
    return (isinstance(v, torch.device) and v.type == "xla"
            or isinstance(v, str) and v.split(":")[0] == "xla")


# torch-xla graph hash -> digest of the IR it was compiled from (see run_graph)
_GRAPHS: dict = {}


def run_graph(values: list, device: torch.device) -> None:
    """Compute the XLA tensors among ``values`` now, as one graph.

    torch-xla 2.9 keys compiled graphs by a hash that does not see which input feeds
    which op (docs/parallelism.md, torch-xla section): two graphs that differ only in
    that share one executable, and the second silently computes the first
    (``b * psum(b * b)`` came back as ``a * psum(b * b)`` after ``a * psum(a * a)``
    ran).  So each hash is bound to the IR text it first ran (which names every
    operand); a different graph under a known hash gets an extra output, ``zeros(k)``,
    that moves it to a hash of its own.  One graph for all outputs also means one
    compiled executable per step, reused while the program's structure holds.
    ``_GRAPHS`` is never cleared (forgetting a hash would let a collision back in); it
    holds one 32-byte digest per distinct graph.
    """
    tensors = [functorch_unwrapped(v) for v in values   # (the XLA tensors torch.func wraps)
               if isinstance(v, torch.Tensor) and v.device.type == "xla"]
    if not tensors:
        return
    ir_text, graph_hash, run = xla_graph_runtime()
    ir = hashlib.sha256(ir_text(tensors).encode()).digest()
    salt = 0
    while True:
        extra = [torch.zeros(salt, device=device)] if salt else []
        seen = _GRAPHS.setdefault(graph_hash(tensors + extra), ir)
        if seen == ir:
            break
        salt += 1
    run(tensors + extra)
