"""The ``"named_axes"`` torch.compile backend: inductor, with the collectives inlined.

Each ``nx.lax`` collective is a ``torch.library`` custom op (``named_axes::psum`` …):
opaque to inductor, which would call it as an external kernel.  On one device its
meaning is plain tensor code (its own implementation), so this backend writes those
implementations into the graph (:func:`inline_collectives`) before inductor sees it;
the collective then fuses with its neighbours.  ``nx.jit`` compiles with it when
``backend='inductor'``.  torch finds the name through the package's
``torch_dynamo_backends`` entry point (setup.cfg), so nothing is registered at run time
(importing this module imports neither dynamo nor inductor).

>>> import torch, named_axes as nx
>>> f = torch.compile(lambda x: (x * 2).sum(), backend="named_axes", fullgraph=True)
>>> float(f(torch.ones(3)))
6.0
"""
from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple, Sequence

import torch

from .._torch_private import (FakeTensorMode, inductor_compile_fx, inductor_mode_options,
                              no_autograd_cache, op_schema)

__all__ = ["compile_named", "compile_flat", "compile_boxed", "Backend",
           "collective_decompositions", "BACKEND_NAME"]

BACKEND_NAME = "named_axes"


def collective_decompositions() -> dict:
    """``{OpOverload: implementation}`` for every registered ``named_axes::`` custom op."""
    from ..lax._opdefs import PLAIN_CODE
    return {getattr(torch.ops.named_axes, name).default: fn for name, fn in PLAIN_CODE.items()}


def inline_collectives(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each ``named_axes::`` collective node, in it and in its subgraphs,
    calling its plain-torch implementation instead (in place; recompiled).

    A traced graph holds the collectives as custom ops: opaque to inductor and
    AOTInductor, and their gradient lives in the ``autograd.Function`` wrappers above
    them, so AOT autograd cannot differentiate them.  Their implementations (sums,
    means, gathers) are ordinary positional code that AOT autograd traces into aten ops,
    differentiates and hands to inductor with its own decompositions.
    """
    table = collective_decompositions()
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        changed = False
        for node in module.graph.nodes:
            if node.op == "call_function" and node.target in table:
                node.target = table[node.target]
                changed = True
        if changed:
            module.recompile()
    return gm


def compile_named(gm: torch.fx.GraphModule, example_inputs: Sequence) -> Callable:
    """Compile an FX graph (torch IR or aten) with inductor, collectives inlined."""
    compile_fx, _ = inductor_compile_fx()
    return compile_fx(inline_collectives(gm), list(example_inputs))


def compile_flat(gm: torch.fx.GraphModule, example_inputs: Sequence, *,
                 grad_off: bool = False, mode: str | None = None,
                 options: dict | None = None) -> Callable:
    """Compile a whole traced program (an aten graph returning a list of tensors).

    Returns a *boxed* function: it takes a list of the input tensors (and empties it)
    and returns the tuple of outputs.  ``nx.jit``'s graphs are already the whole
    forward+backward step, so AOT autograd has nothing to add at run time: when its
    runtime wrapper would be a no-op (:func:`_plain_program`: no op writes, no output
    aliases an input; no input deduplicated), inductor's compiled graph is called
    directly, without that wrapper.  Otherwise (or on a torch whose internals differ)
    the full ``compile_fx`` result is used.

    ``mode`` and ``options`` are ``torch.compile``'s (``mode="max-autotune"`` turns on
    inductor's own GEMM autotuning); kernels are inductor's choice.

    The caller guarantees that every call passes tensors with the example inputs'
    sizes and strides (``nx.jit`` keys its cache on them), so inductor's per-call size
    and stride asserts are left out.

    With grad enabled and example inputs (or graph constants) that require grad, the
    result is AOT autograd's differentiable function (compiled forward and backward in
    one autograd node), called through its wrapper.  ``grad_off``: the caller runs the
    result with grad disabled (then constants requiring grad do not matter).
    """
    compile_fx, compile_fx_inner = inductor_compile_fx()

    example = list(example_inputs)
    plain = _plain_program(gm, example)   # (read before inductor's passes edit the graph)
    gm = inline_collectives(gm)
    captured: list = []

    def inner(g, inputs, *args, **kwargs):
        out = compile_fx_inner(g, inputs, *args, **kwargs)
        captured.append((out, len(inputs)))
        return out

    # (size_asserts: an inductor option in every torch this library supports, >= 2.9)
    patches = {**_mode_options(mode), **(options or {}), "size_asserts": False}
    # AOT autograd's own cache would skip ``inner`` on a hit (and with it the direct
    # call below); inductor's FX-graph cache under it still saves the code generation.
    with no_autograd_cache():
        full = compile_fx(gm, _fake_inputs(example), inner_compile=inner,
                          config_patches=patches)
    differentiable = _differentiable(gm, example, grad_off)
    direct = None if differentiable or not plain else _direct_callable(captured, example)
    if direct is not None:
        return direct
    return lambda args: full(*args)


def _mode_options(mode: str | None) -> dict:
    """Inductor's options for a ``torch.compile`` mode (``"max-autotune"`` ...)."""
    if mode in (None, "default"):
        return {}
    return inductor_mode_options(mode)


def _fake_inputs(example: list) -> list:
    """The example inputs as fake tensors of a fake mode with a shape environment.

    Inductor's FX-graph cache and AOT autograd's cache are used only when the compile
    sees a shape environment (dynamo's backends always do); a graph traced by ``nx.jit``
    has none, so without this every process would recompile from scratch.  Static
    shapes: the guards on sizes are the ones ``nx.jit``'s own cache key already checks.
    """
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    return [mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t
            for t in example]


_PLAIN_NAMESPACES = ("aten", "prims", "named_axes")   # (a mesh program: the wrapper)


def _plain_program(gm: torch.fx.GraphModule, example: list) -> bool:
    """Whether AOT autograd's runtime wrapper around the compiled ``gm``, run without
    grad, has nothing to do, read off the graph conservatively: plain tensor inputs,
    aten and named_axes ops only, none that writes (to anything), and outputs that share
    no memory with an input, a constant or each other (views of an intermediate value
    are fine: without grad no alias is regenerated)."""
    if not all(type(t) is torch.Tensor for t in example):
        return False
    root: dict = {}   # node -> the node whose memory its value is (a view's base)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            root[node] = None   # outside memory
        elif node.target is operator.getitem:   # one result of a multi-result op
            parent = root.get(node.args[0], node.args[0])
            root[node] = node if parent is node.args[0] else parent
        elif node.op == "call_function":
            schema = op_schema(node.target)
            if schema is None or schema.is_mutable or \
                    getattr(node.target, "namespace", None) not in _PLAIN_NAMESPACES:
                return False   # (other namespaces: ops with effects get AOT's tokens)
            base = node.args[0] if node.args else None
            view = any(r.alias_info is not None for r in schema.returns)
            root[node] = root.get(base, base) if view and isinstance(
                base, torch.fx.Node) else node
        elif node.op == "output":
            outs: list = []
            torch.fx.node.map_arg(node.args[0], outs.append)
            roots = [root.get(o, o) for o in outs]
            return None not in roots and len(set(roots)) == len(roots)
        else:   # call_module, call_method
            return False
    return False


def _differentiable(gm: torch.fx.GraphModule, example: list,
                    grad_off: bool = False) -> bool:
    """Whether the compiled ``gm`` must be differentiable: grad is on and an example
    input, or (unless the caller runs it with grad off) a constant, requires grad."""
    return torch.is_grad_enabled() and (
        any(t.requires_grad for t in example) or (not grad_off and _grad_constants(gm)))


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
    out, n_inputs = captured[0]
    call = getattr(out, "current_callable", None)
    if n_inputs != len(example) or call is None:
        return None
    # run once through the OutputCode (its first call finishes compile-time bookkeeping)
    out(list(example))
    return out.current_callable


class Backend(NamedTuple):
    """Which compiler ``nx.jit`` hands its graphs to: ``torch.compile``'s backend name,
    and for inductor its ``mode`` and ``options``."""
    name: str
    mode: Any = None
    options: tuple = ()   # sorted (key, value) pairs: hashable, part of no cache key


def compile_boxed(gm: torch.fx.GraphModule, example: list, backend: Backend,
                  grad_off: bool = False) -> Callable:
    """A *boxed* compiled function: it takes the list of flat input tensors.

    With example inputs that require grad (grad on) the result is differentiable: the
    inductor path goes through AOT autograd (a compiled forward and backward in one
    autograd node), as ``torch.compile`` does; the collectives are then their plain
    torch code, whatever the backend (their custom ops carry no autograd formula).
    ``grad_off``: the caller runs it with grad disabled.
    """
    if backend.name == "inductor":   # (compile_flat inlines the collectives itself)
        return compile_flat(gm, example, grad_off=grad_off, mode=backend.mode,
                            options=dict(backend.options))
    if _differentiable(gm, example, grad_off):
        gm = inline_collectives(gm)
    if backend.name == "eager":
        return lambda args: gm(*args)
    compiled = torch.compile(gm, backend=backend.name, fullgraph=True, dynamic=False)
    return lambda args: compiled(*args)
