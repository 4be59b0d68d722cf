"""The torch.distributed engine: named axes split over a ``DeviceMesh`` as DTensors.

One process per device, launched by ``torchrun`` (gloo on CPU, nccl on GPU).  Every
rank passes the full, global inputs.  Each input becomes a DTensor whose placements
follow the plan (``Shard(d)`` on the mesh axes its named axes are mapped to,
``Replicate()`` elsewhere; made from the rank's own slice, so nothing moves), and the
program then runs on DTensors: DTensor's sharding propagation and collectives do the
rest — a sum over a sharded named axis becomes a ``Partial`` placement that DTensor
all-reduces when needed.  Outputs come back as full tensors on every rank (a
collective: every rank must call), or as DTensors with ``Mesh(..., outputs='dtensor')``.

Gradients flow: the input conversion is one autograd function for all inputs that need
a gradient; its backward makes every gradient full, so ``x.grad`` on every rank is the
full gradient.  The partial sums (the gradients of replicated inputs, e.g. the weights
under data parallelism) share one flat all-reduce; sharded gradients are all-gathered.

Communication per call, for a data-parallel step: the input check (one all-gather of an
8-byte digest, before anything else), whatever the program's
ops need (the loss's all-reduce), and one all-reduce for all the weights' gradients —
one collective fewer per extra weight than hand-written ``full_tensor()`` per gradient.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .._errors import AxisResourceError
from .._tensor import NamedTensor

__all__ = ["DTensorEngine", "device_mesh"]


def device_mesh(m) -> Any:
    """The ``DeviceMesh`` of a :class:`Mesh` (built once, on first use, on every rank)."""
    dm = m._cache.get("device_mesh")
    if dm is None:
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh

        if not (dist.is_available() and dist.is_initialized()):
            raise AxisResourceError(
                f"{m!r} spans {m.size} devices, but torch.distributed is not initialized; "
                f"launch with `torchrun --nproc-per-node={m.size} ...` and call "
                f"torch.distributed.init_process_group() (or use backend='xla')")
        world = dist.get_world_size()
        ids = torch.as_tensor(m.device_ids.astype("int64"))
        if int(ids.max()) >= world:
            raise AxisResourceError(f"{m!r} names rank {int(ids.max())}, but the process group "
                                    f"has {world} ranks")
        device_type = "cuda" if m.platform == "cuda" else "cpu"
        dm = DeviceMesh(device_type, ids, mesh_dim_names=tuple(str(a) for a in m.axis_names))
        m._cache["device_mesh"] = dm
        # The group that checks the ranks agree on each call (collective: all ranks build it).
        ranks = sorted(int(r) for r in ids.flatten())
        m._cache["check_group"] = (None if ranks == list(range(world))
                                   else dist.new_group(ranks))
    return dm


def fingerprint(leaves: list) -> list:
    """What every rank must agree on: each input leaf's kind, dtype, shape and names."""
    out = []
    for i, x in enumerate(leaves):
        if isinstance(x, NamedTensor):
            out.append(f"leaf {i}: {x._data.dtype} physical {tuple(x._data.shape)} "
                       f"named {x._names!r}")
        elif isinstance(x, torch.Tensor):
            out.append(f"leaf {i}: {x.dtype} {tuple(x.shape)}")
        elif x is None or isinstance(x, (bool, int, float, complex, str)):
            out.append(f"leaf {i}: {x!r}")
        else:
            out.append(f"leaf {i}: {type(x).__name__}")
    return out


def check_ranks_agree(leaves: list, group, what: str = "xmap") -> None:
    """Raise on every rank, naming the ranks, when ranks pass differently shaped inputs.

    Under the DTensor engine every rank must run the same program on the same full inputs;
    ranks that disagree would pair up unrelated collectives (a silent wrong answer or a
    hang).  One all-gather of an 8-byte digest per call; the descriptions are exchanged
    only when the digests differ (all ranks see the same digests, so all take that path).
    """
    import hashlib

    import torch.distributed as dist

    desc = fingerprint(leaves)
    digest = hashlib.blake2b("\n".join(desc).encode(), digest_size=7).digest()
    mine = torch.tensor([int.from_bytes(digest, "little")], dtype=torch.int64)
    world = dist.get_world_size(group)
    seen = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(seen, mine, group=group)
    if all(int(t) == int(mine) for t in seen):
        return
    descs: list = [None] * world
    dist.all_gather_object(descs, desc, group=group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(world))
    me = dist.get_rank()
    ref = descs[0]
    lines = []
    for r, d in zip(ranks, descs):
        diff = [f"{a}  (rank {ranks[0]}: {b})" for a, b in zip(d, ref) if a != b]
        if len(d) != len(ref):
            diff.append(f"{len(d)} input leaves (rank {ranks[0]}: {len(ref)})")
        if diff:
            lines.append(f"  rank {r}: " + "; ".join(diff))
    raise AxisResourceError(
        f"{what} on the DTensor engine (rank {me} of {world}): the ranks were given "
        f"different inputs:\n" + "\n".join(lines) + "\nUnder torch.distributed every rank "
        f"passes the same full (global) inputs and the engine splits them; give every rank "
        f"the same arguments.")


_registered = False


def register_collectives() -> None:
    """Let DTensor run nx.lax's registered collective ops by their plain-torch definitions.

    Each collective is a ``torch.library`` custom op on physical tensors (so graphs show it
    by name); DTensor has no sharding rule for it.  On DTensors we run the op's own
    Python definition (``x.sum(dims)``, an einsum, ...), which DTensor shards and turns into
    the right collectives (a sum over a sharded dim -> ``Partial`` -> all-reduce).  Uses
    DTensor's per-op handler table (``_custom_op_handlers``, private but stable since 2.3).
    """
    global _registered
    if _registered:
        return
    try:
        from ..lax import _ops
    except ImportError:
        return
    from torch._library.custom_ops import CustomOpDef
    from torch.distributed.tensor import DTensor

    handlers = getattr(getattr(DTensor, "_op_dispatcher", None), "_custom_op_handlers", None)
    if handlers is None:  # pragma: no cover - a torch without the table
        return
    for value in vars(_ops).values():
        if isinstance(value, CustomOpDef):
            impl = value._init_fn
            handlers[value._opoverload] = (
                lambda op_call, args, kwargs, impl=impl: impl(*args, **kwargs))
    _registered = True


def _placements(plan, names: tuple, ndim: int):
    from torch.distributed.tensor import Replicate, Shard

    return [Replicate() if d is None else Shard(d) for _, d in plan.placements(names, ndim)]


class _Distribute(torch.autograd.Function):
    """Full tensors -> DTensors (this rank's slices); backward: the gradients -> full
    tensors, all partial sums in one all-reduce (:func:`full_tensors`)."""

    @staticmethod
    def forward(dm, placements, *xs):
        from torch.distributed.tensor import distribute_tensor

        return tuple(distribute_tensor(x.detach(), dm, p, src_data_rank=None)
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
        if i not in grad:
            out[i] = distribute_tensor(x, dm, placements[i], src_data_rank=None)
    if grad:
        dts = _Distribute.apply(dm, [placements[i] for i in grad], *[xs[i] for i in grad])
        for i, dt in zip(grad, dts):
            out[i] = dt
    return out


def distribute(x: torch.Tensor, dm, placements) -> torch.Tensor:
    """Split a full tensor over ``dm`` per ``placements`` (differentiable)."""
    return distribute_many([x], dm, [placements])[0]


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


def to_full(x: Any) -> Any:
    """DTensor -> full tensor (all-gather / all-reduce as the placements need)."""
    if type(x).__name__ == "DTensor":
        return x.full_tensor()
    return x


class DTensorEngine:
    """Runs a named program on DTensors over the :class:`Mesh`'s ``DeviceMesh``."""

    def __init__(self, plan, mesh, *, outputs: str = "full") -> None:
        self.plan = plan
        self.mesh = mesh
        self.outputs = outputs
        self.device_mesh = device_mesh(mesh)
        # Cross-rank input check on every run (SerialLoop chunks included: each rank runs
        # the same chunks, so the checks pair up).
        self.check_inputs = True
        register_collectives()
        self.device = torch.device(self.device_mesh.device_type, torch.cuda.current_device()) \
            if self.device_mesh.device_type == "cuda" else torch.device("cpu")

    def _split_spec(self, leaf: Any, what: str):
        """``(data, placements)`` for an input leaf to split, or None to pass it through."""
        if isinstance(leaf, NamedTensor):
            data, names = leaf._data, leaf._names
        elif isinstance(leaf, torch.Tensor):
            data, names = leaf, ()
        else:
            return None
        if type(data).__name__ == "DTensor":
            return None
        self.plan.check_value(names, what)
        for n in names:
            if not self.plan.in_mesh_order(n):
                axes = self.plan.mesh_axes[n]
                raise AxisResourceError(
                    f"axis_resources maps axis {n!r} to mesh axes {axes!r}, against the mesh's "
                    f"axis order {self.plan.mesh_axis_names!r}; the DTensor engine splits a dim "
                    f"over several mesh axes in mesh order only: list them in that order")
        if data.device != self.device:
            data = data.to(self.device)
        return data, _placements(self.plan, names, data.dim() - len(names))

    def to_dtensors(self, leaves: list) -> list:
        """Input leaves -> NamedTensors over DTensors placed per the plan (nothing moves:
        each rank keeps its own slice of the full input)."""
        specs = [self._split_spec(x, f"argument leaf {i}") for i, x in enumerate(leaves)]
        idx = [i for i, sp in enumerate(specs) if sp is not None]
        dts = distribute_many([specs[i][0] for i in idx], self.device_mesh,
                              [specs[i][1] for i in idx])
        out = list(leaves)
        for i, dt in zip(idx, dts):
            leaf = leaves[i]
            out[i] = NamedTensor._wrap(dt, leaf._names) if isinstance(leaf, NamedTensor) else dt
        return out

    def to_dtensor(self, leaf: Any, what: str = "an input") -> Any:
        """One input leaf -> a NamedTensor over a DTensor placed per the plan."""
        spec = self._split_spec(leaf, what)
        if spec is None:
            return leaf
        dt = distribute(spec[0], self.device_mesh, spec[1])
        return NamedTensor._wrap(dt, leaf._names) if isinstance(leaf, NamedTensor) else dt

    def from_dtensor(self, leaf: Any) -> Any:
        if self.outputs == "dtensor":
            return leaf
        if isinstance(leaf, NamedTensor):
            return NamedTensor._wrap(to_full(leaf._data), leaf._names)
        return to_full(leaf)

    def run(self, body: Callable, leaves: list, engine: Any = None) -> list:
        from torch.distributed.tensor.experimental import implicit_replication

        if self.check_inputs:
            check_ranks_agree(leaves, self.mesh._cache.get("check_group"))
        dleaves = self.to_dtensors(leaves)
        with implicit_replication():
            outs = body(dleaves, engine=engine if engine is not None else self)
            return [self.from_dtensor(o) for o in outs]
