"""The ``"named_axes"`` torch.compile backend: inductor, with the collectives inlined.

Each ``nx.lax`` collective is a ``torch.library`` custom op (``named_axes::psum`` …):
opaque to inductor, which would call it as an external kernel.  On one device its
meaning is plain tensor code (its own implementation), so this backend hands inductor
those implementations as decompositions; the collective then fuses with its
neighbours.  ``nx.jit`` compiles with it when ``backend='inductor'``.  The name is
registered by ``named_axes._compile_compat`` as soon as ``torch._dynamo`` is imported
(importing this module imports neither dynamo nor inductor).

>>> import torch, named_axes as nx
>>> f = torch.compile(lambda x: (x * 2).sum(), backend="named_axes", fullgraph=True)
>>> float(f(torch.ones(3)))
6.0
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from . import _isa_probe, _matmul_choice

__all__ = ["compile_named", "compile_flat", "collective_decompositions", "BACKEND_NAME"]

BACKEND_NAME = "named_axes"


def collective_decompositions() -> dict:
    """``{OpOverload: implementation}`` for every registered ``named_axes::`` custom op."""
    try:
        from .. import lax  # noqa: F401  (registers the ops)
    except ImportError:  # pragma: no cover - collectives not built
        return {}
    from torch._library.custom_ops import OPDEFS

    table = {}
    for qualname, opdef in list(OPDEFS.items()):
        if qualname.startswith("named_axes::"):
            ns, name = qualname.split("::")
            packet = getattr(getattr(torch.ops, ns), name)
            table[packet.default] = opdef._init_fn
    return table


def inline_collectives(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each ``named_axes::`` collective node calling its plain-torch
    implementation instead (in place; recompiled).

    A traced graph holds the collectives as custom ops whose gradient lives in the
    ``autograd.Function`` wrappers above them, so AOT autograd cannot differentiate
    them; their implementations (sums, means, gathers) it can, with the ordinary
    gradients of the positional program.
    """
    table = collective_decompositions()
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in table:
            node.target = table[node.target]
            changed = True
    if changed:
        gm.recompile()
    return gm


# A matmul this small (batch * m * n * k multiply-adds) costs less as a fused
# multiply-and-sum loop than as an external BLAS call (a call, two tensor views and an
# output allocation each): inductor then fuses it with its neighbours.
SMALL_MATMUL = 1 << 13


def _small_matmul(prev: Callable | None) -> Callable:
    """A decomposition of ``mm`` / ``bmm``: tiny floating matmuls become a broadcast
    multiply and a sum; others go to ``prev`` (inductor's own), else stay as they are."""
    def decomp(a: torch.Tensor, b: torch.Tensor) -> Any:
        if _is_small(a, b):
            return _multiply_sum(a, b)
        return NotImplemented if prev is None else prev(a, b)
    return decomp


def _is_small(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.is_floating_point() and b.dtype == a.dtype
            and a.numel() * b.shape[-1] <= SMALL_MATMUL)


def _multiply_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


def _measured_mm(a: torch.Tensor, b: torch.Tensor,
                 bias: torch.Tensor | None = None) -> torch.Tensor | None:
    """``a @ b (+ bias)`` (2-D) in the formulation timed fastest here, or None when
    it is not a product that is timed (see ``_matmul_choice``)."""
    if not _matmul_choice.measured(a, b):
        return None
    return _matmul_choice.FORMS[_matmul_choice.choose(a, b, bias)](a, b, bias)


def _matmul(prev: Callable | None, batched: bool) -> Callable:
    """A decomposition of ``mm`` / ``bmm``: tiny floating matmuls become a broadcast
    multiply and a sum, large float32 CPU ones (a ``bmm`` of one batch, or with an
    operand shared by all batches, too) run in the formulation timed fastest on this
    machine; others go to ``prev`` (inductor's own), else stay as they are."""
    small = _small_matmul(prev)

    def decomp(a: torch.Tensor, b: torch.Tensor) -> Any:
        if _matmul_choice.emitting_plain():
            return NotImplemented if prev is None else prev(a, b)
        if not batched:
            out = _measured_mm(a, b)
        elif a.shape[0] == 1 and b.shape[0] == 1:
            # one batch (a pdot's lowering): a 2-D product, so the graph's view of the
            # result back to 2-D cancels (no reinterpret of an output per call)
            out = _measured_mm(a[0], b[0])
            if out is None and _is_small(a, b):
                out = _multiply_sum(a[0], b[0])
            out = None if out is None else out.unsqueeze(0)
        else:
            out = _shared_operand_bmm(a, b)
        return small(a, b) if out is None else out
    return decomp


def _shared_operand_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """A large ``bmm`` one of whose operands is the same for every batch (stride 0: the
    backward of a sum over a batched axis, ``psum(o @ wo, 'heads')``) as one 2-D product,
    the batch folded into the other operand's rows or columns; else None.  Eight
    (1024, 256) @ (256, 32) products took 2.1 ms, the one (1024, 256) @ (256, 256) 1.9.
    The result is row-major, as ``bmm``'s: a decomposition keeps eager's strides (the
    graph's outputs have them, and user code may ``view`` them)."""
    h, m, k = a.shape
    n = b.shape[2]
    if h < 2 or (a.stride(0) == 0) == (b.stride(0) == 0):
        return None
    if b.stride(0) == 0:   # out[i] = a[i] @ b[0]
        rows = a.reshape(h * m, k)
        if not _matmul_choice.measured(rows, b[0]):
            return None
        return _measured_mm(rows, b[0]).view(h, m, n)
    cols = b.permute(1, 0, 2).reshape(k, h * n)   # out[i] = a[0] @ b[i]
    if not _matmul_choice.measured(a[0], cols):
        return None
    # (m, h, n) in memory; bmm's (h, m, n) layout costs one copy (P2's: 0.06 ms, 1.6 the product)
    return _measured_mm(a[0], cols).view(m, h, n).permute(1, 0, 2).contiguous()


def _addmm(prev: Callable | None) -> Callable:
    """``addmm`` (``nn.Linear``) with a row-vector bias and unit scales: as ``_matmul``."""
    def decomp(bias, a, b, *, beta=1, alpha=1) -> Any:
        out = None
        if (not _matmul_choice.emitting_plain() and beta == 1 and alpha == 1
                and bias.dim() == 1 and bias.dtype == a.dtype):
            out = _measured_mm(a, b, bias.expand(b.shape[1]))
        if out is not None:
            return out
        return NotImplemented if prev is None else prev(bias, a, b, beta=beta, alpha=alpha)
    return decomp


def _decompositions(flat: bool = False) -> dict:
    return _DecompositionTable(flat)


def _source_digest() -> str:
    import hashlib

    h = hashlib.sha256()
    for path in (__file__, _matmul_choice.__file__):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


class _DecompositionTable(dict):
    """Inductor's table plus the collectives' own code (and, for ``nx.jit``, matmul by size).

    Inductor hashes the decomposition table into its on-disk cache keys by pickling it;
    the table holds closures and C++ functions that do not pickle, which would turn the
    FX-graph cache off. The table pickles as what builds it: this class, ``flat`` and a
    digest of this module's and ``_matmul_choice``'s source (a changed rule gives a new
    key).
    """

    def __init__(self, flat: bool, digest: str = "") -> None:
        from torch._inductor.decomposition import select_decomp_table

        super().__init__(select_decomp_table())
        self.update(collective_decompositions())
        if flat:   # static shapes (nx.jit): size-dependent choices add no guards
            for op, batched in ((torch.ops.aten.bmm.default, True),
                                (torch.ops.aten.mm.default, False)):
                self[op] = _matmul(self.get(op), batched)
            addmm = torch.ops.aten.addmm.default
            self[addmm] = _addmm(self.get(addmm))
        self.flat = flat

    def __reduce__(self):
        return (_DecompositionTable, (self.flat, _source_digest()))


def compile_named(gm: torch.fx.GraphModule, example_inputs: Sequence) -> Callable:
    """Compile an FX graph (torch IR or aten) with inductor, collectives inlined."""
    from torch._inductor.compile_fx import compile_fx

    _isa_probe.before_compile()
    out = compile_fx(gm, list(example_inputs), decompositions=_decompositions())
    _isa_probe.after_compile()
    return out


def compile_flat(gm: torch.fx.GraphModule, example_inputs: Sequence, *,
                 grad_off: bool = False) -> Callable:
    """Compile a whole traced program (an aten graph returning a list of tensors).

    Returns a *boxed* function: it takes a list of the input tensors (and empties it)
    and returns the tuple of outputs.  ``nx.jit``'s graphs are already the whole
    forward+backward step, so AOT autograd has nothing to add at run time: when its
    runtime wrapper would be a no-op (no input mutated, no output aliasing an input,
    no input deduplicated), we call inductor's compiled graph directly and save that
    wrapper's per-call cost.  Otherwise (or on a torch whose internals differ) the
    full ``compile_fx`` result is used.

    Shapes are static here, so matmuls are lowered by size: tiny ones fuse with their
    neighbours as multiply-and-sum loops, large float32 CPU ones run in the formulation
    (BLAS or oneDNN, transposed or not) timed fastest on this machine.

    The caller guarantees that every call passes tensors with the example inputs'
    sizes and strides (``nx.jit`` keys its cache on them), so inductor's per-call size
    and stride asserts are left out.

    With grad enabled and example inputs (or graph constants) that require grad, the
    result is AOT autograd's differentiable function (compiled forward and backward in
    one autograd node), called through its wrapper.  ``grad_off``: the caller runs the
    result with grad disabled (then constants requiring grad do not matter).
    """
    from .. import _compile_compat

    _compile_compat.install()
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    example = list(example_inputs)
    if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in example):
        from ._heap import tune_heap

        tune_heap()   # a step's freed buffers stay in the heap (see _heap)
    captured: list = []

    def inner(g, inputs, *args, **kwargs):
        out = compile_fx_inner(g, inputs, *args, **kwargs)
        captured.append((out, len(inputs), _plain_inference(g, len(example))))
        return out

    patches = {"size_asserts": False} if hasattr(config, "size_asserts") else {}
    patches["post_grad_custom_post_pass"] = _with_own_passes(config.post_grad_custom_post_pass)
    # AOT autograd's own cache would skip ``inner`` on a hit (and with it the direct
    # call below); inductor's FX-graph cache under it still saves the code generation.
    _isa_probe.before_compile()
    with torch._functorch.config.patch(enable_autograd_cache=False):
        full = compile_fx(gm, _fake_inputs(example), inner_compile=inner,
                          config_patches=patches, decompositions=_decompositions(flat=True))
    _isa_probe.after_compile()
    differentiable = torch.is_grad_enabled() and (
        any(t.requires_grad for t in example) or (not grad_off and _grad_constants(gm)))
    direct = None if differentiable else _direct_callable(captured, example)
    if direct is not None:
        return direct
    return lambda args: full(*args)


def _with_own_passes(user_passes: Any) -> Any:
    """The user's post-grad passes (if any), then nx.jit's own (``_fold_pass.OwnPasses``:
    a bmm summed over its batch folded, scalars realized)."""
    from ._fold_pass import OwnPasses

    if user_passes is None:
        return OwnPasses()
    try:
        from torch._inductor.custom_graph_pass import get_custom_graph_passes
    except ImportError:   # torch < 2.10 takes one pass: the user's stays alone
        return user_passes
    return (*get_custom_graph_passes(user_passes), OwnPasses())


def _fake_inputs(example: list) -> list:
    """The example inputs as fake tensors of a fake mode with a shape environment.

    Inductor's FX-graph cache and AOT autograd's cache are used only when the compile
    sees a shape environment (dynamo's backends always do); a graph traced by ``nx.jit``
    has none, so without this every process recompiled from scratch. Static shapes: the
    guards on sizes are the ones ``nx.jit``'s own cache key already checks.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    return [mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t
            for t in example]


def _plain_inference(g: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOT autograd's runtime wrapper around ``g`` does nothing at run time."""
    try:
        meta = torch._guards.TracingContext.try_get().fw_metadata
        if meta is None or len(meta.input_info) != n_inputs:
            return False
        subclass = getattr(meta, "subclass_inp_meta", None) or ()
        return (not any(i.mutates_data or i.mutates_metadata for i in meta.input_info)
                and all(o.output_type.name == "non_alias" for o in meta.output_info)
                and meta.num_intermediate_bases == 0
                and not getattr(meta, "tokens", None)
                and not getattr(meta, "is_rng_op_functionalized", False)
                and not any(type(m).__name__ == "SubclassCreationMeta" for m in subclass))
    except Exception:  # pragma: no cover - other torch versions: keep the wrapper
        return False


def _grad_constants(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph holds constants (closed-over tensors) that require grad."""
    for v in list(gm.parameters()) + list(gm.buffers()):
        if v.requires_grad:
            return True
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            v = getattr(gm, node.target, None)
            if isinstance(v, torch.Tensor) and v.requires_grad:
                return True
    return False


def _direct_callable(captured: list, example: list) -> Callable | None:
    if len(captured) != 1:
        return None
    out, n_inputs, plain = captured[0]
    call = getattr(out, "current_callable", None)
    if not plain or n_inputs != len(example) or call is None:
        return None
    # run once through the OutputCode (its first call finishes compile-time bookkeeping)
    out(list(example))
    return out.current_callable
