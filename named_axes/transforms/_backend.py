"""The ``"named_axes"`` torch.compile backend, and how ``nx.jit`` compiles its graphs.

Each ``nx.lax`` collective is a custom op (``named_axes::psum`` …), opaque to inductor;
on one device it is plain tensor code, which this backend writes into the graph
(:func:`inline_collectives`) so that it fuses with its neighbours.  torch finds the
backend through the package's ``torch_dynamo_backends`` entry point (setup.cfg).

>>> import torch, named_axes as nx
>>> f = torch.compile(lambda x: (x * 2).sum(), backend="named_axes", fullgraph=True)
>>> float(f(torch.ones(3)))
6.0
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Callable, NamedTuple, Sequence

import torch

from .._torch_private import (FakeTensorMode, inductor_compile_fx, inductor_mode_options,
                              no_autograd_cache, op_schema)

__all__ = ["compile_named", "compile_flat", "compile_boxed", "Backend", "inline_collectives",
           "constants", "lift_constants", "outputs"]


class Backend(NamedTuple):
    """Which compiler ``nx.jit`` hands its graphs to: ``torch.compile``'s backend name,
    and for inductor its ``mode`` and ``options``."""
    name: str
    mode: Any = None
    options: tuple = ()   # sorted (key, value) pairs: hashable, part of no cache key


def constants(gm: torch.fx.GraphModule) -> list:
    """The tensors the graph closed over (parameters, buffers, other tensors)."""
    attrs = (getattr(gm, n.target, None) for n in gm.graph.nodes if n.op == "get_attr")
    return [v for v in attrs if isinstance(v, torch.Tensor)]


def lift_constants(gm: torch.fx.GraphModule) -> tuple:
    """A copy of ``gm`` taking the tensors it closed over as extra inputs after its own,
    and those tensors (:func:`constants`, in that order); other attributes stay."""
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    graph = gm.graph
    own = [n for n in graph.nodes if n.op == "placeholder"]
    last = own[-1] if own else None   # (a program without arguments: first in the graph)
    lifted = []
    for node in [n for n in graph.nodes if n.op == "get_attr"]:
        value = getattr(gm, node.target)
        if isinstance(value, torch.Tensor):
            with graph.inserting_after(last) if last is not None else graph.inserting_before():
                last = graph.placeholder(f"const_{len(lifted)}")
            node.replace_all_uses_with(last)
            graph.erase_node(node)
            lifted.append(value)
    graph.lint()
    gm.recompile()
    return gm, lifted


def outputs(gm: torch.fx.GraphModule) -> list:
    """The nodes the graph returns (a traced program returns a list of tensors)."""
    return list(next(n for n in gm.graph.nodes if n.op == "output").args[0])


def inline_collectives(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each ``named_axes::`` collective node, in it and in its subgraphs,
    calling its plain-torch implementation instead (in place; recompiled).

    Their custom ops are opaque to inductor and AOTInductor, and their gradient lives in
    the ``autograd.Function`` wrappers above them; their implementations (sums, means,
    gathers) are ordinary code that AOT autograd traces, differentiates and lowers.
    """
    from ..lax._opdefs import PLAIN_CODE

    table = {getattr(torch.ops.named_axes, name).default: fn for name, fn in PLAIN_CODE.items()}
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


def compile_boxed(gm: torch.fx.GraphModule, example: list, backend: Backend,
                  values: bool = False) -> Callable:
    """A *boxed* compiled function of ``gm``: from the list of flat inputs to the outputs.

    With grad on and inputs (or constants) requiring grad the result is differentiable
    (AOT autograd, as ``torch.compile``), the collectives their plain code whatever the
    backend (their custom ops carry no autograd formula).  ``values``: the program
    computes its gradients itself; compiled and run with grad disabled.
    """
    if values:
        with torch.no_grad():
            return _without_grad(compile_boxed(gm, [t.detach() for t in example], backend))
    if backend.name == "inductor":   # (compile_flat inlines the collectives itself)
        return compile_flat(gm, example, mode=backend.mode, options=dict(backend.options))
    if _differentiable(gm, example):
        gm = inline_collectives(gm)
    if backend.name == "eager":
        return lambda args: gm(*args)
    compiled = torch.compile(gm, backend=backend.name, fullgraph=True, dynamic=False)
    return lambda args: compiled(*args)


def _without_grad(compiled: Callable) -> Callable:
    set_grad = torch.set_grad_enabled

    def call(args):
        prev = torch.is_grad_enabled()
        set_grad(False)
        try:
            return compiled(args)
        finally:
            set_grad(prev)
    return call


def compile_flat(gm: torch.fx.GraphModule, example_inputs: Sequence, *,
                 mode: str | None = None, options: dict | None = None) -> Callable:
    """Compile a whole traced program (an aten graph returning a list of tensors) with
    inductor, as a boxed function (it empties the list it takes).

    Where AOT autograd's runtime wrapper would do nothing (:func:`_plain_program`)
    inductor's compiled graph is called directly.  Every call passes the example inputs'
    sizes and strides (``nx.jit`` keys its cache on them), so size asserts are left out.
    ``mode`` and ``options`` are ``torch.compile``'s.  Random ops draw from torch's
    generators as eager ones do, and compiling draws nothing: a seeded program gives
    eager's numbers.
    """
    compile_fx, compile_fx_inner = inductor_compile_fx()
    example = list(example_inputs)
    _drop_unused_tensors(gm)
    plain = _plain_program(gm, example)   # (read before inductor's passes edit the graph)
    gm = inline_collectives(gm)
    captured: list = []

    def inner(g, inputs, *args, **kwargs):
        out = compile_fx_inner(g, inputs, *args, **kwargs)
        captured.append((out, len(inputs)))
        return out

    patches = {**(inductor_mode_options(mode) if mode not in (None, "default") else {}),
               "fallback_random": True, **(options or {}), "size_asserts": False}
    cuda = sorted({t.device.index or 0 for t in example if t.is_cuda})
    # AOT autograd's own cache would skip ``inner`` on a hit (and with it the direct
    # call below); inductor's FX-graph cache under it still saves the code generation.
    with no_autograd_cache(), torch.random.fork_rng(devices=cuda):
        full = compile_fx(gm, _fake_inputs(example), inner_compile=inner,
                          config_patches=patches)
        if plain and not _differentiable(gm, example) and len(captured) == 1:
            out, n_inputs = captured[0]
            if n_inputs == len(example) and getattr(out, "current_callable", None) is not None:
                out(list(example))   # (its first call finishes compile-time bookkeeping)
                return out.current_callable
    return lambda args: full(*args)


def _drop_unused_tensors(gm: torch.fx.GraphModule) -> None:
    """Delete the tensors ``gm`` holds that no node reads: inductor would take each as
    one more input, and its compiled graph could no longer be called directly."""
    used = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    for name, _ in [*gm.named_parameters(recurse=False), *gm.named_buffers(recurse=False)]:
        if name not in used:
            delattr(gm, name)


def _fake_inputs(example: list) -> list:
    """The example inputs as fake tensors (static shapes) of a fake mode with a shape
    environment: inductor's FX-graph cache is used only when the compile sees one."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    return [mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t
            for t in example]


_PLAIN_NAMESPACES = ("aten", "prims", "named_axes")   # (a mesh program: the wrapper)


def _plain_program(gm: torch.fx.GraphModule, example: list) -> bool:
    """Whether AOT autograd's runtime wrapper around the compiled ``gm``, run without
    grad, has nothing to do: plain tensor inputs, aten and named_axes ops that write
    nothing, and outputs that share no memory with an input, a constant or each other
    (views of an intermediate are fine: without grad no alias is regenerated)."""
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


def _differentiable(gm: torch.fx.GraphModule, example: list) -> bool:
    """Whether the compiled ``gm`` must be differentiable: grad is on and an example
    input or a constant requires grad."""
    return torch.is_grad_enabled() and (
        any(t.requires_grad for t in example) or grad_constants(gm))


def grad_constants(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph holds constants (closed-over tensors) that require grad."""
    return any(v.requires_grad for v in [*gm.parameters(), *gm.buffers(), *constants(gm)])
