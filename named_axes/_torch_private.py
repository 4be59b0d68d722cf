"""The private torch APIs named_axes uses, each with why and the public one considered.

Every private torch name goes through this module, so a torch upgrade that moves one
breaks here, loudly, in one place (tests/test_private_torch.py checks that no other
module names one, and that none is reached under ``except Exception``).  Each entry says
**Why** it is needed and the **Public** alternative considered.  Modules torch imports
anyway are bound at import; the others (inductor, dynamo, DTensor, functional
collectives) only when called.

>>> from named_axes import _torch_private
>>> _torch_private.functorch_level() is None      # no torch.func transform running
True
"""
from __future__ import annotations

import sys
import warnings
from typing import Callable

import torch
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensor,
                                           FakeTensorMode)
from torch.utils._python_dispatch import (TorchDispatchMode, _disable_current_modes,
                                         _get_current_dispatch_mode_stack)
from torch.utils._pytree import tree_flatten

__all__ = ["functorch_level", "functorch_active", "functorch_transform_kind",
           "functorch_transform_kinds", "is_functorch_wrapped", "functorch_unwrapped",
           "functorch_disabled", "dispatch_depth", "dispatch_modes", "disable_dispatch_modes",
           "TorchDispatchMode", "EagerDispatchMode", "tracing_mode_active", "tensor_version",
           "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves",
           "native_batch_norm_legit", "softmax_backward_data", "softmax_backward_data_op",
           "functional_all_reduce", "functional_all_gather", "functional_reduce_scatter",
           "FakeTensor", "FakeTensorMode", "DataDependentOutputException",
           "DynamicOutputShapeException", "op_schema", "tensor_guards", "no_autograd_cache",
           "uncached_fake_mode", "inductor_compile_fx", "inductor_mode_options", "aoti_package",
           "aoti_package_loader", "dynamo_loaded", "is_functional_collective",
           "dynamo_operator_tables", "dynamo_forget_handlers", "xla_graph_runtime",
           "function_applies", "module_converting"]


# -- torch.func's levels and wrappers -----------------------------------------------------
# Whether any torch.func transform is active: the cheap test made on every named value
# built (dynamo traces it inside its torch.func operators, unlike the interpreter stack).
# Why: named values must not silently change meaning under a torch.func transform that
# named_axes did not open.  Public: none.
functorch_active = torch._C._are_functorch_transforms_active


def _interpreters() -> list:
    """torch.func's active transforms (its interpreter stack), outermost first."""
    return torch._C._functorch.get_interpreter_stack() or []


def functorch_level() -> int | None:
    """The innermost active torch.func transform's level, or None.

    Why: the level tells the transforms named_axes opened from a user's.  Public: none
    (torch.func exposes no level)."""
    if not functorch_active():
        return None
    stack = _interpreters()
    return stack[-1].level() if stack else None


def functorch_transform_kinds() -> tuple:
    """The kinds of the active torch.func transforms, outermost first (``"Grad"``,
    ``"Jvp"``, ``"Vmap"``, ``"Functionalize"``).

    Why: only differentiating transforms give named values another meaning, and the
    DTensor local-shard path runs under ``grad`` only.  Public: none
    (``torch._functorch.pyfunctorch``'s wrappers of the same stack are private too)."""
    return tuple(i.key().name for i in _interpreters())


def functorch_transform_kind() -> str | None:
    """The innermost active torch.func transform's kind, or None (why and public: as
    :func:`functorch_transform_kinds`)."""
    kinds = functorch_transform_kinds()
    return kinds[-1] if kinds else None


def function_applies(frame) -> list:
    """``(cls, args)`` of each ``torch.autograd.Function.apply`` running on the stack
    from ``frame`` outwards, innermost first.

    Why: a user's Function given named values records no gradient (``apply`` takes a
    NamedTensor for a non-tensor), and only its ``apply`` frame knows the Function and
    its arguments; this reads that frame's locals (``cls``, ``args``).  Public: none
    (``apply`` consults no ``__torch_function__``)."""
    out = []
    while frame is not None:
        if frame.f_code is _APPLY:
            out.append((frame.f_locals["cls"], frame.f_locals["args"]))
        frame = frame.f_back
    return out


_APPLY = torch.autograd.Function.apply.__func__.__code__


def module_converting(frame) -> bool:
    """Whether a module's conversion (``.double()``, ``.to()``, ``.half()``...) runs on
    the stack from ``frame`` outwards: the method ``nn.Module`` runs them through.

    Why: nx.jit refuses a conversion inside a traced program before it replaces a
    module's parameters with traced ones.  Public: none (no hook sees a conversion
    replace parameters); this matches torch's ``Module._apply`` frame by its name."""
    while frame is not None:
        if frame.f_code.co_name == "_apply" and \
                frame.f_globals.get("__name__") == torch.nn.Module.__module__:
            return True
        frame = frame.f_back
    return False


# Whether a tensor is one of torch.func's wrappers (batched or grad-tracking).  Why: a
# value check on a copy of the values, and SerialLoop's comparison of chunks, need the
# plain tensor.  Public: none.
is_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def functorch_unwrapped(t: torch.Tensor) -> torch.Tensor:
    """``t`` out of torch.func's wrappers (each ``vmap`` batch dim moved to the front).

    Why: SerialLoop checks that chunks computed the same value, every batch entry at
    once.  Public: none (``torch.func`` unwraps only at a transform's exit)."""
    while torch._C._functorch.is_functorch_wrapped_tensor(t):
        bdim = torch._C._functorch.maybe_get_bdim(t)   # -1: not a batched tensor
        t = torch._C._functorch.get_unwrapped(t)
        if bdim >= 0:
            t = t.movedim(bdim, 0)
    return t


# A context manager that turns every torch.func transform off.  Why: SerialLoop draws its
# chunks' seed (one number for the whole call) past an enclosing vmap's randomness check.
# Public: none (vmap(randomness=...) is the caller's choice).
functorch_disabled = torch._C._DisableFuncTorch


# -- Dispatch modes -----------------------------------------------------------------------
# How many torch dispatch modes are active (a C function: called on hot paths).  Why: a
# mode that does not run values (make_fx, FakeTensorMode) changes what the library may
# compute.  Public: none.
dispatch_depth = torch._C._len_torch_dispatch_stack


# The active torch dispatch modes, innermost last (a list).  Why: as dispatch_depth; the
# library's own modes are told apart by a flag.  Public: none.
dispatch_modes = _get_current_dispatch_mode_stack
# A context manager running its body without the active dispatch modes.  Why: nx.jit's
# trace probe runs an optimizer's real step outside make_fx.  Public: none.
disable_dispatch_modes = _disable_current_modes


# TorchDispatchMode (imported above): the base of the library's own dispatch modes (nx.jit's
# trace probe and program recorder).  Why: they observe every aten op of a traced program.
# Public: ``torch.overrides.TorchFunctionMode`` sees torch functions, not make_fx's aten ops.


class EagerDispatchMode(TorchDispatchMode):
    """A TorchDispatchMode that runs only on real values, outside any compile.

    Why: TorchDispatchMode's default ``_should_skip_dynamo`` imports dynamo (slow) on
    first use, to make dynamo skip the mode's calls; a mode never run under dynamo says
    so here.  Public: none (no public switch)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


def tracing_mode_active() -> bool:
    """Whether make_fx's proxy mode or a FakeTensorMode is active.

    Why: under a trace the mesh engine skips its input check (no values) and gathers
    full outputs itself (no DTensor in the graph).  Public:
    ``torch.compiler.is_dynamo_compiling()`` (checked too) misses make_fx."""
    if not dispatch_depth():
        return False
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
    return any(isinstance(m, (FakeTensorMode, ProxyTorchDispatchMode)) for m in dispatch_modes())


def tensor_version(t: torch.Tensor) -> int:
    """``t``'s version counter (bumped by each in-place write).

    Why: detect writes into tensors shared by a named op's instances.  Public: none."""
    return t._version


# -- Pytrees ------------------------------------------------------------------------------
# tree_flatten (imported above).  Why: named_axes walks arguments as torch does (a type
# registered with torch's pytree is a container for nx.xmap, nx.jit...).  Public: none
# (torch 2.9-2.13 have no public pytree module); the functions below, and the lax loops'
# leaf paths, are built on it and the TreeSpec's own methods.


def tree_unflatten(leaves, spec):
    """The tree of ``spec`` holding ``leaves`` (torch's ``tree_unflatten``)."""
    return spec.unflatten(leaves)


def tree_map(func: Callable, tree, *rests, is_leaf: Callable | None = None):
    """``tree`` with ``func`` applied to each leaf (and ``rests``'), as torch's."""
    leaves, spec = tree_flatten(tree, is_leaf=is_leaf)
    return spec.unflatten(map(func, leaves, *(spec.flatten_up_to(r) for r in rests)))


def tree_leaves(tree, is_leaf: Callable | None = None) -> list:
    """``tree``'s leaves in torch's pytree order (torch's ``tree_leaves``)."""
    return tree_flatten(tree, is_leaf=is_leaf)[0]


# -- Aten ops with private names ----------------------------------------------------------
# Why: F.batch_norm calls it (rules.nn gives it named shapes; its batching rule gives
# wrong values, so it is looped).  Public: ``torch.native_batch_norm`` (also listed) is
# not what F.batch_norm calls.
native_batch_norm_legit = torch._native_batch_norm_legit
# Why: softmax's backward; its batching rule is wrong with one operand batched.  Public:
# none.  (The torch function, None on a torch without it, and the op packet, whose
# ``.default`` is its overload.)
softmax_backward_data = getattr(torch, "_softmax_backward_data", None)
softmax_backward_data_op = torch.ops.aten._softmax_backward_data


# -- DTensor and collectives --------------------------------------------------------------
# Why (the three functional_*): out-of-place collectives, as DTensor issues them
# (CommDebugMode counts them; make_fx traces them into graphs inductor compiles).
# Public: ``torch.distributed``'s collectives write in place, and make_fx cannot trace them.
def _waited(out: torch.Tensor) -> torch.Tensor:
    """A functional collective's result, waited for (eager calls return an
    ``AsyncCollectiveTensor``; traced ones a tensor already waited in the graph)."""
    wait = getattr(out, "wait", None)
    return out if wait is None else wait()


def functional_all_reduce(x: torch.Tensor, op: str, group) -> torch.Tensor:
    """``x`` all-reduced over ``group`` with functional collectives, waited for."""
    from torch.distributed._functional_collectives import all_reduce
    return _waited(all_reduce(x, op, group))


def _old_name(collective: Callable, *args) -> torch.Tensor:
    """``collective(*args)`` waited for, without the FutureWarning torch 2.13 gives its
    ``*_tensor`` name (deprecated for a ``*_single`` name torch 2.9 lacks; dynamo traces
    no ``catch_warnings``, and torch does not warn under it)."""
    if torch.compiler.is_dynamo_compiling():
        return _waited(collective(*args))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*_functional_collectives.*deprecated",
                                category=FutureWarning)
        return _waited(collective(*args))


def functional_all_gather(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """``x`` of every rank of ``group`` concatenated along ``dim``, waited for."""
    from torch.distributed._functional_collectives import all_gather_tensor
    return _old_name(all_gather_tensor, x, dim, group)


def functional_reduce_scatter(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """``x`` summed over ``group``, each rank keeping its block along ``dim``, waited for."""
    from torch.distributed._functional_collectives import reduce_scatter_tensor
    return _old_name(reduce_scatter_tensor, x, "sum", dim, group)


def is_functional_collective(op) -> bool:
    """Whether ``op`` (an fx node's target) is a functional collective.

    Why: nx.jit compiles mesh programs apart.  Public: none (the ops live in the private
    ``_c10d_functional`` namespace)."""
    return getattr(op, "namespace", None) == "_c10d_functional"


# -- Tracing and compiling ----------------------------------------------------------------
# FakeTensor, FakeTensorMode and its two exceptions (imported above).  Why: nx.eval_shape
# runs programs on fake tensors, and nx.jit gives inductor fake inputs with a shape
# environment (its caches need one).  Public: none.


def op_schema(func):
    """The schema of an aten op (``OpOverload``), or None for anything else.

    Why: which arguments an op writes.  Public: ``torch.fx.Node.is_impure()`` answers for
    graph nodes only, and also for ops that write nothing."""
    return getattr(func, "_schema", None)


def tensor_guards(leaves: list):
    """Dynamo's C++ guard passing tensors with the sizes, strides, dtypes, devices,
    dispatch keys and ``requires_grad`` of ``leaves``.

    Why: nx.jit's fast call path checks its arguments in one C call.  Public: comparing
    each tensor's metadata in Python (slower per call)."""
    from torch._C._dynamo.guards import TensorGuards
    return TensorGuards(*leaves, dynamic_dims_sizes=[list(a.shape) for a in leaves],
                        dynamic_dims_strides=[list(a.stride()) for a in leaves])


def uncached_fake_mode() -> FakeTensorMode:
    """A FakeTensorMode as ``make_fx(tracing_mode="fake")`` builds its own, without the
    fake-tensor dispatch cache.

    Why: with the cache, a second trace of a ``jacfwd`` over a view past storage offset
    0 (a rank's shard) hits forward AD's internal assert "tangent have the same layout as
    primal"; nx.jit traces such a program again without it.  Public: none
    (``torch._dynamo.config.fake_tensor_cache_enabled`` is process-wide; make_fx takes a
    fake mode only through its inputs)."""
    from torch._functorch.config import patch
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with patch(fake_tensor_allow_unsafe_data_ptr_access=False):
        mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True,
                              shape_env=ShapeEnv(), static_shapes=True)
    mode.cache_enabled = False
    return mode


def no_autograd_cache():
    """A context manager turning AOT autograd's cache off.

    Why: a cache hit would skip the inner compile nx.jit watches.  Public: none."""
    from torch._functorch.config import patch
    return patch(enable_autograd_cache=False)


def inductor_compile_fx() -> tuple:
    """Inductor's ``(compile_fx, compile_fx_inner)``.

    Why: nx.jit compiles whole traced programs (aten graphs) with inductor.  Public:
    ``torch.compile`` traces with dynamo again."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    return compile_fx, compile_fx_inner


def inductor_mode_options(mode: str) -> dict:
    """Inductor's options for a ``torch.compile`` mode (``"max-autotune"`` ...).

    Why: nx.jit takes torch.compile's modes.  Public: none (``torch.compile``'s
    documentation points to this function)."""
    from torch._inductor import list_mode_options
    return list_mode_options(mode)


def aoti_package(graph, example: tuple, package_path: str) -> str:
    """``graph`` exported and compiled by AOTInductor into the ``.pt2`` package
    ``package_path``; returns its path.

    Why: nx.jit's program store keeps compiled programs on disk.  Public: none; this is
    torch's documented AOTInductor packaging, whose home module is private."""
    from torch._inductor import aoti_compile_and_package
    exported = torch.export.export(graph, example, strict=False)
    return aoti_compile_and_package(exported, package_path=package_path)


def aoti_package_loader():
    """AOTInductor's package loader class (``(path, "model", False, 1, -1)`` loads a
    ``.pt2`` package; ``.run(inputs)`` runs it), or None on a torch without it.

    Why: load a stored program.  Public: ``torch._inductor.aoti_load_package`` (private
    too) imports inductor and dynamo, which the store exists to avoid; this is the class
    it constructs."""
    aoti = getattr(torch._C, "_aoti", None)
    return getattr(aoti, "AOTIModelPackageLoader", None)


def dynamo_loaded() -> bool:
    """Whether dynamo has been imported in this process (``import named_axes`` never
    imports it: it is slow to import).

    Why: an xmap is registered with ``torch.compiler.allow_in_graph`` (which imports
    dynamo) only once dynamo is there.  Public: none."""
    return "torch._dynamo" in sys.modules


# -- Dynamo's operator tables (nx.enable_dynamo_matmul, an explicit opt-in) ---------------
def dynamo_operator_tables() -> tuple:
    """Dynamo's reverse-operator table and its binop table (``None`` where this torch
    has neither).

    Why: dynamo's tables lack ``matmul`` (``_compile_compat``).  Public: none; the fix
    is an explicit opt-in, never applied at import."""
    from torch._dynamo.variables import builtin
    populate = getattr(builtin, "populate_builtin_to_tensor_fn_map", None)
    reverse = getattr(builtin, "BUILTIN_TO_TENSOR_RFN_MAP", None)
    if populate is not None:
        populate()
    binops = getattr(builtin.BuiltinVariable, "_binops", None)
    return reverse, (binops() if binops is not None else None)


def dynamo_forget_handlers(ops: tuple) -> None:
    """Drop dynamo's cached handlers for the operators ``ops``, so that a table entry
    changed after dynamo traced them takes effect.

    Why: dynamo caches the handlers it derives from its tables (``_binop_handlers`` and
    ``call_function_handler_cache``).  Public: ``torch._dynamo.reset()`` clears compiled
    frames, not these."""
    from torch._dynamo.variables import builtin
    cls = builtin.BuiltinVariable
    handlers = getattr(cls, "_binop_handlers", None)
    if handlers is not None and hasattr(handlers, "cache_clear"):
        handlers.cache_clear()
    cache = getattr(cls, "call_function_handler_cache", None)
    if cache is not None:
        for key in [k for k in cache if k and k[0] in ops]:
            del cache[key]


# -- torch-xla ----------------------------------------------------------------------------
def xla_graph_runtime() -> tuple:
    """torch-xla's ``(IR text of tensors, graph hash of tensors, run tensors as one
    graph now)``.

    Why: :func:`named_axes.parallel._xla.run_graph` binds each graph hash to the IR it
    ran, since torch-xla 2.9 keys compiled graphs by a hash that does not see which input
    feeds which op (a silent wrong answer otherwise).  Public: ``torch_xla.sync()`` runs
    every live tensor, so the graph it runs is not the one whose hash was checked."""
    import torch_xla

    xla = torch_xla._XLAC
    return (xla._get_xla_tensors_text, xla._get_graph_hash,
            lambda tensors: xla._xla_sync_multi(tensors, [], wait=True))
