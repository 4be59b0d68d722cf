"""The torch.distributed engine: named axes split over a ``DeviceMesh``.

One process per device, launched by ``torchrun`` (gloo on CPU, nccl on GPU).  Every rank
runs the body on its own shards (:mod:`._dtensor_spmd`); this module holds what the engine
does around that: the cross-rank input check (:mod:`._rank_check`, once per new input
structure), the inputs that go through DTensors, and the outputs.

Inputs are either full, global values (the same on every rank) or DTensors already sharded
over the mesh (``nx.NamedSharding``, :mod:`._sharded`).  A DTensor laid out otherwise than
the plan says is redistributed (counted in :data:`SUMMARY`) or refused
(``Mesh(on_mismatch='error')``); its gradient comes back in its own layout
(:class:`_KeepLayout`: no all-gather; partial sums over data-parallel axes share one flat
all-reduce).  A full input on another device becomes a DTensor whose placements follow the
plan (``Shard(d)`` on the mesh axes its named axes are mapped to, ``Replicate()``
elsewhere; made from the rank's own slice, so nothing moves), its gradient full on every
rank (:class:`_Distribute`: the partial sums in one flat all-reduce).  Outputs come back as
full tensors on every rank (a collective: every rank must call), or as DTensors
(``Mesh(outputs=...)``).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .._engine import EngineBase
from .._errors import AxisResourceError
from .._tensor import NamedTensor, data_and_names
from .._torch_private import tracing_mode_active
from ._dtensor_comms import SUMMARY, device_mesh, reduce_to
from ._dtensor_comms import placements as _placements
from ._dtensor_spmd import run_on_local_shards
from ._rank_check import check_ranks_agree, structure_key

__all__ = ["DTensorEngine", "device_mesh"]


class _Distribute(torch.autograd.Function):
    """Full tensors -> DTensors (this rank's slices); backward: the gradients -> full
    tensors, all partial sums in one all-reduce (:func:`full_tensors`)."""

    @staticmethod
    def forward(dm, placements, *xs):
        from torch.distributed.tensor import distribute_tensor

        return tuple(distribute_tensor(x.detach().contiguous(), dm, p, src_data_rank=None)
                     for x, p in zip(xs, placements))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *gs):
        return (None, None, *full_tensors(gs))


def distribute_many(xs: list, dm, placements: list) -> list:
    """Split full tensors over ``dm`` per ``placements``, differentiably: one autograd node
    for all that need a gradient, so their gradients are reduced together."""
    from torch.distributed.tensor import distribute_tensor

    out = list(xs)
    grad = [i for i, x in enumerate(xs) if x.requires_grad] if torch.is_grad_enabled() else []
    for i, x in enumerate(xs):
        if i not in grad:   # contiguous: a DTensor keeps its input's global strides, and
            # DTensor's decompositions (a 3-operand einsum's views) refuse a chunk's strides
            out[i] = distribute_tensor(x.contiguous(), dm, placements[i], src_data_rank=None)
    if grad:
        dts = _Distribute.apply(dm, [placements[i] for i in grad], *[xs[i] for i in grad])
        for i, dt in zip(grad, dts):
            out[i] = dt
    return out


def _summable(placements) -> bool:
    """Partial on some mesh axis and Replicate on the others: the local tensor has the
    full shape and an all-reduce makes it full, so several can share one collective."""
    return (any(p.is_partial() for p in placements)
            and all(p.is_partial() or p.is_replicate() for p in placements))


def full_tensors(xs) -> list:
    """DTensors -> full tensors (other leaves as they are), with the partial sums that
    share placements and dtype flattened into one buffer and all-reduced once; the rest
    by ``full_tensor()``.  The order is the same on every rank (it is the leaves' order),
    so the collectives pair up."""
    out = list(xs)
    groups: dict = {}
    for i, x in enumerate(xs):
        if type(x).__name__ != "DTensor":
            continue
        if _summable(x.placements):
            groups.setdefault((tuple(x.placements), x.dtype, x.device_mesh), []).append(i)
        else:
            out[i] = x.full_tensor()
    for (placements, _, dm), idx in groups.items():
        if len(idx) == 1:
            out[idx[0]] = xs[idx[0]].full_tensor()
            continue
        from torch.distributed.tensor import DTensor

        local = [xs[i].to_local() for i in idx]
        flat = torch.cat([t.reshape(-1) for t in local])
        full = DTensor.from_local(flat, dm, placements, run_check=False).full_tensor()
        for i, piece in zip(idx, full.split([t.numel() for t in local])):
            out[i] = piece.view(xs[i].shape)
    return out


class _KeepLayout(torch.autograd.Function):
    """DTensor inputs -> the same values; backward: each gradient -> its input's placements
    (so the gradient of a sharded parameter is sharded like it: no all-gather), the partial
    sums over data-parallel mesh axes reduced together (:func:`reduce_to`)."""

    @staticmethod
    def forward(dm, placements, *xs):
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dm, ctx.placements = inputs[0], inputs[1]
        ctx.set_materialize_grads(False)   # an input the outputs ignore gets no gradient

    @staticmethod
    def backward(ctx, *gs):
        return (None, None, *reduce_to(gs, ctx.placements, ctx.dm))


def _fmt_place(placements) -> str:
    return "[" + ", ".join(str(p) for p in placements) + "]"


_MAX_CHECKED = 256


class DTensorEngine(EngineBase):
    """Runs a named program on DTensors over the :class:`Mesh`'s ``DeviceMesh``."""

    def __init__(self, plan, mesh, *, outputs: str = "auto") -> None:
        self.plan = plan
        self.mesh = mesh
        self.outputs = outputs
        self.on_mismatch = getattr(mesh, "on_mismatch", "redistribute")
        self.device_mesh = device_mesh(mesh)
        self.sharded_in = False
        self.device = torch.device(self.device_mesh.device_type, torch.cuda.current_device()) \
            if self.device_mesh.device_type == "cuda" else torch.device("cpu")

    def _check_names(self, names: tuple, what: str) -> None:
        self.plan.check_value(names, what)
        for n in names:
            if not self.plan.in_mesh_order(n):
                axes = self.plan.mesh_axes[n]
                raise AxisResourceError(
                    f"axis_resources maps axis {n!r} to mesh axes {axes!r}, against the mesh's "
                    f"axis order {self.plan.mesh_axis_names!r}; the DTensor engine splits a dim "
                    f"over several mesh axes in mesh order only: list them in that order")

    def _mismatch(self, dt, want, names: tuple, what: str) -> str:
        have = _fmt_place(dt.placements)
        return (f"{what} (named axes {names!r}, global shape {tuple(dt.shape)}) is a DTensor "
                f"laid out {have} over mesh axes {self.plan.mesh_axis_names!r}, but "
                f"axis_resources {self.plan.resources!r} places it {_fmt_place(want)}")

    def to_dtensors(self, leaves: list) -> list:
        """Input leaves -> NamedTensors over DTensors placed per the plan.  Full inputs are
        split locally (each rank keeps its own slice: nothing moves); DTensor inputs whose
        layout matches the plan are taken as they are; others are redistributed (counted
        in :data:`SUMMARY`) or refused (``Mesh(on_mismatch='error')``)."""
        out = list(leaves)
        full_idx, full_data, full_place = [], [], []
        sharded = []   # (i, names, dtensor, wanted placements)
        for i, leaf in enumerate(leaves):
            pair = data_and_names(leaf)
            if pair is None:
                continue
            data, names = pair
            want = self._wanted(data, names, f"argument leaf {i}")
            if type(data).__name__ == "DTensor":
                sharded.append((i, names, data, want))
                continue
            if data.device != self.device:
                data = data.to(self.device)
            full_idx.append(i)
            full_data.append(data)
            full_place.append(want)
        dts = distribute_many(full_data, self.device_mesh, full_place)
        SUMMARY.distributed_inputs += len(full_idx)
        for i, dt in zip(full_idx, dts):
            out[i] = dt
        if sharded:
            self.sharded_in = True
            for (i, _, _, _), d in zip(sharded, self._laid_out(sharded)):
                out[i] = d
        for i, leaf in enumerate(leaves):
            if out[i] is not leaf and isinstance(leaf, NamedTensor):
                out[i] = NamedTensor._wrap(out[i], leaf._names)
        return out

    def _wanted(self, data: Any, names: tuple, what: str) -> list:
        """The placements the plan gives an input named ``names``, once its names and (a
        DTensor's) mesh are checked."""
        self._check_names(names, what)
        want = _placements(self.plan, names, data.dim() - len(names))
        if type(data).__name__ == "DTensor" and data.device_mesh != self.device_mesh:
            raise AxisResourceError(
                f"{what} (named axes {names!r}) is a DTensor over mesh "
                f"{data.device_mesh!r}, but this xmap runs on {self.device_mesh!r}; "
                f"make it over the mesh in scope (nx.NamedSharding(mesh, ...))")
        return want

    def _laid_out(self, sharded: list) -> list:
        """The DTensor inputs ``(i, names, dtensor, wanted placements)`` laid out as the
        plan says: those that differ are redistributed, or refused with
        ``on_mismatch='error'``.  Their gradients come back in their own layouts."""
        datas = [d for _, _, d, _ in sharded]
        grad = ([k for k, d in enumerate(datas) if d.requires_grad]
                if torch.is_grad_enabled() else [])
        if grad:
            kept = _KeepLayout.apply(self.device_mesh,
                                     [tuple(datas[k].placements) for k in grad],
                                     *[datas[k] for k in grad])
            for k, d in zip(grad, kept):
                datas[k] = d
        laid = []
        for (i, names, orig, want), d in zip(sharded, datas):
            if tuple(d.placements) != tuple(want):
                what = f"argument leaf {i}"
                if self.on_mismatch == "error":
                    raise AxisResourceError(
                        self._mismatch(orig, want, names, what) + "; make it with that "
                        f"layout (nx.device_put(x, nx.NamedSharding(mesh, "
                        f"{dict(self.plan.resources)!r}), axes=...)) or use "
                        f"Mesh(..., on_mismatch='redistribute')")
                d = d.redistribute(self.device_mesh, want)
                SUMMARY.redistributed_inputs += 1
                SUMMARY.redistributions.append(
                    (f"{what} {names!r}", _fmt_place(orig.placements), _fmt_place(want)))
            else:
                SUMMARY.sharded_inputs += 1
            laid.append(d)
        return laid

    def _out_mode(self) -> str:
        if self.outputs == "auto":
            return "sharded" if self.sharded_in else "full"
        return self.outputs

    def from_dtensor(self, leaf: Any) -> Any:
        mode = self._out_mode()
        if mode == "dtensor":
            return leaf
        pair = data_and_names(leaf)
        if pair is None or type(pair[0]).__name__ != "DTensor":
            return leaf
        data, names = pair
        if mode == "full":
            SUMMARY.full_outputs += 1
            data = data.full_tensor()   # (all-gather / all-reduce as the placements need)
        else:
            SUMMARY.sharded_outputs += 1
            want = _placements(self.plan, names, data.dim() - len(names))
            if tuple(data.placements) != tuple(want):
                data = data.redistribute(self.device_mesh, want)
        return NamedTensor._wrap(data, names) if isinstance(leaf, NamedTensor) else data

    def _check(self, leaves: list) -> None:
        checked = self.mesh._cache.setdefault("checked_structures", set())
        key = structure_key(leaves)
        try:
            if key in checked:
                return
        except TypeError:   # an unhashable leaf: check every call
            key = None
        check_ranks_agree(leaves, self.mesh._cache.get("check_group"))
        SUMMARY.input_checks += 1
        if key is not None:
            if len(checked) >= _MAX_CHECKED:
                checked.clear()
            checked.add(key)

    # (xmap hands a mesh call under torch.compile to nx.jit; should dynamo reach the
    # engine otherwise, it runs eagerly, outside dynamo's graph)
    @torch.compiler.disable
    def run(self, body: Callable, leaves: list, engine: Any = None) -> list:
        """Run ``body`` on this rank's shards (:mod:`._dtensor_spmd`; ``engine``: the
        SerialLoop engine whose chunk this is)."""
        SUMMARY.calls += 1
        # the cross-rank input check, once per new input structure (SerialLoop chunks
        # included: each rank runs the same chunks, so the checks pair up); a trace has
        # no values to check
        if not tracing_mode_active():
            self._check(leaves)
        return run_on_local_shards(self, body, leaves, SUMMARY, loop=engine)
