"""One ``nx.jit`` program: the function traced into an aten graph, checked, compiled.

:func:`compile_program` traces the function on fake tensors (tracing must not run it:
it may mutate its inputs), refuses what a compiled program could not carry
(``transforms/_trace_probe.py``), compiles the graph for the backend and returns a
:class:`Program`: the compiled function of the flat tensor inputs, and the code that
turns its flat outputs back into the function's result.  :func:`load_stored` gives a
program from the program store instead (``transforms/_store.py``).

>>> import torch
>>> from named_axes.transforms._backend import Backend
>>> p = compile_program(lambda x: {'y': x * 2, 'n': None}, (torch.ones(2),), (),
...                     Backend('eager'))
>>> p.rebuild(p.compiled([torch.ones(2)]))
{'y': tensor([2., 2.]), 'n': None}
>>> p.pure, p.values
(True, False)
"""
from __future__ import annotations

import types
from typing import Any, Callable, NamedTuple, Sequence

import torch

from .._tensor import NamedTensor
from .._torch_private import (is_functional_collective, op_schema, tree_flatten, tree_unflatten,
                              uncached_fake_mode)
from . import _store
from ._backend import Backend, _differentiable, _grad_constants, compile_boxed
from ._graph import trace_flat
from ._jit_joint import joint_program
from ._trace_probe import (TraceProbe, check_grads_untouched, check_no_stale_numbers,
                           refusing_optimizer_steps)

__all__ = ["Program", "compile_program", "build", "stored_ok", "load_stored"]

_NT = NamedTensor
_Tensor = torch.Tensor


class Program(NamedTuple):
    """One compiled program of a jitted function (see :func:`build`; ``compiled`` None:
    calls with its key run the function inline)."""
    compiled: Callable | None
    tensor_pos: Any
    rebuild: Callable
    pure: bool
    values: bool
    stored: bool = False   # loaded from the program store, or handed to it


class Traced(NamedTuple):
    """A checked trace (see :func:`_trace`)."""
    gm: torch.fx.GraphModule
    leaves: list
    tensor_pos: list
    out_info: list
    is_tensor: list   # per output leaf: a tensor (else a constant, None included)
    values: bool      # the program ran a backward while traced


def compile_program(fun: Callable, args: tuple, static: tuple, backend: Backend,
                    ident: Any = None) -> Program:
    """:func:`build` under the compile lock."""
    with _store.compile_lock:
        return build(fun, args, static, backend, ident)


def build(fun: Callable, args: tuple, static: tuple, backend: Backend,
          ident: Any = None) -> Program:
    """Trace and compile ``fun`` into a :class:`Program`.

    ``tensor_pos`` picks the tensor leaves out of the flat leaves (None: all of them);
    ``rebuild`` turns the compiled function's flat outputs into ``fun``'s result;
    ``pure``: the program mutates nothing; ``values``: it ran a backward while traced
    (it computes its own gradients), so it runs with grad disabled and serves calls
    whatever their inputs' ``requires_grad``.  ``ident``: the call's identity in the
    program store (``_store.identify``); a program whose results are values, that
    mutates nothing and closes over no tensor the trace made is compiled into it.
    """
    dyn_fun, dyn_args = _bind_static(fun, args, static)
    tr = _trace(getattr(fun, "__name__", "fun"), dyn_fun, dyn_args)
    gm, leaves, tensor_pos = tr.gm, tr.leaves, tr.tensor_pos
    example = [leaves[i] for i in tensor_pos]
    rebuild = _output_builder(tr.out_info, tr.is_tensor)
    differentiable = not tr.values and _differentiable(gm, example)
    positions = None if ident is None else _store.closed_over_positions(_constants(gm), ident)
    stored = (positions is not None and not differentiable and _pure(gm)
              and _same_output(tr.out_info, tr.is_tensor, ident))
    if stored:   # compiled for later processes at exit
        _store.save_later(gm, example, ident, positions)
    all_tensors = len(tensor_pos) == len(leaves)
    if differentiable and _communicates(gm):
        # AOT autograd would differentiate the rank's program anew, and torch.distributed's
        # functional collectives have no gradient there (the path's own Functions do):
        # traced with its backward and cut in two (_jit_joint), or else run inline
        joint = None
        if _pure(gm) and not _grad_constants(gm):
            joint = joint_program(dyn_fun, dyn_args, example, _results(gm),
                                  lambda g, ex: _compile_graph(g, ex, backend, True))
        if joint is None:
            return Program(None, None, rebuild, False, False)
        return Program(joint, None if all_tensors else tensor_pos, rebuild, True, False)
    compiled = _compile_graph(gm, example, backend, tr.values)
    return Program(compiled, None if all_tensors else tensor_pos, rebuild, _pure(gm),
                   tr.values, stored)


def _bind_static(fun: Callable, args: tuple, static: tuple) -> tuple:
    """``(dyn_fun, dyn_args)``: ``fun`` of its dynamic arguments only, the static ones
    (positions ``static``) fixed to their values in ``args``."""
    n = len(args)
    st = {i % n for i in static}
    if not st:
        return fun, args
    st_args = {i: args[i] for i in st}

    def dyn_fun(*dyn):
        it = iter(dyn)
        return fun(*[st_args[i] if i in st else next(it) for i in range(n)])

    return dyn_fun, tuple(a for i, a in enumerate(args) if i not in st)


def _trace(name: str, dyn_fun: Callable, dyn_args: tuple) -> Traced:
    """``dyn_fun`` traced on fake tensors (tracing must not run the program: it may
    mutate its inputs), with what a compiled program could not carry refused: an
    optimizer step, a backward writing ``.grad``, a number read from updated state.

    A trace that fails on forward AD's internal layout assert (a torch bug with the
    fake-tensor dispatch cache) is traced once more without that cache
    (:func:`uncached_fake_mode`; not always without it: forward mode's zero Hessians
    then come back as meta tensors)."""
    try:
        return _trace_once(name, dyn_fun, dyn_args, None)
    except (RuntimeError, ValueError) as e:   # (a NamedAxisError may carry torch's message)
        if "has_fw_view" not in str(e):
            raise
    return _trace_once(name, dyn_fun, dyn_args, uncached_fake_mode())


def _trace_once(name: str, dyn_fun: Callable, dyn_args: tuple, fake_mode) -> Traced:
    result: list = []
    traced_inputs: list = []
    probe = TraceProbe()

    had: dict = {}   # id(input) -> the .grad it came with (a fake copy of its real one)

    def traced(*a):
        traced_inputs[:] = [x._data if type(x) is _NT else x for x in tree_flatten(a)[0]
                            if type(x) is _NT or isinstance(x, _Tensor)]
        had.update((id(t), t.grad) for t in traced_inputs if t.is_leaf)
        with probe:
            result[:] = [dyn_fun(*a)]
        return result[0]

    try:
        with refusing_optimizer_steps(name):
            gm, leaves, (_, _, tensor_pos), out_info = trace_flat(traced, dyn_args,
                                                                   mode="fake",
                                                                   fake_mode=fake_mode)
    finally:
        probe.restore()
    is_tensor = [type(x) is _NT or isinstance(x, _Tensor) for x in tree_flatten(result[0])[0]]
    result.clear()
    check_grads_untouched(name, traced_inputs + _constants(gm), had)
    traced_inputs.clear()
    check_no_stale_numbers(name, probe)
    return Traced(gm, leaves, tensor_pos, out_info, is_tensor, probe.ran)


def _compile_graph(gm: torch.fx.GraphModule, example: list, backend: Backend,
                   values: bool) -> Callable:
    """The boxed compiled function of ``gm`` (see :func:`build` for ``values``)."""
    if values:   # the program computes its gradients itself: its results are values
        with torch.no_grad():
            return _no_grad_call(compile_boxed(gm, [t.detach() for t in example], backend,
                                               grad_off=True))
    return compile_boxed(gm, example, backend)


def _no_grad_call(compiled: Callable) -> Callable:
    """``compiled`` run with grad disabled (its results are values)."""
    set_grad = torch.set_grad_enabled

    def call(args):
        prev = torch.is_grad_enabled()
        set_grad(False)
        try:
            return compiled(args)
        finally:
            set_grad(prev)
    return call


def stored_ok(backend: Backend, bound: dict, tied: bool) -> bool:
    """Whether this call may use the program store (see ``_store``): one is set, the
    backend is inductor in its default mode, no axes are bound around the call, no
    tensor is passed twice."""
    return (backend == Backend("inductor") and not bound and not tied
            and _store.program_store() is not None and _store.available())


def load_stored(ident: Any, leaves: list) -> Program | None:
    """The stored program ``ident`` names, or None when the store lacks it."""
    compiled = _store.load(ident)
    if compiled is None:
        return None
    pos = [i for i, x in enumerate(leaves) if isinstance(x, _Tensor)]
    return Program(compiled, None if len(pos) == len(leaves) else pos,
                   _output_builder(ident.out_info, ident.is_tensor), True, False, True)


def _same_output(out_info: list, is_tensor: list, ident: Any) -> bool:
    """Whether the traced result has the structure the identifying eager call returned."""
    spec, names, consts = ident.out_info
    return (is_tensor == ident.is_tensor and out_info[0] == spec and out_info[1] == names
            and repr(out_info[2]) == repr(consts))


def _results(gm: torch.fx.GraphModule) -> list:
    """The traced (fake) values of the graph's tensor outputs."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return [n.meta["val"] for n in out.args[0]]


def _constants(gm: torch.fx.GraphModule) -> list:
    """The tensors the graph closed over (parameters, buffers, other tensors)."""
    attrs = (getattr(gm, n.target, None) for n in gm.graph.nodes if n.op == "get_attr")
    return [v for v in attrs if isinstance(v, torch.Tensor)]


def _communicates(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph holds a torch.distributed collective (a mesh call's program)."""
    return any(n.op == "call_function" and is_functional_collective(n.target)
               for n in gm.graph.nodes)


def _pure(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph mutates nothing (then a call repeating one tensor as two
    arguments may use a program traced for distinct ones)."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = op_schema(node.target)
        # without a schema, Python functions (operator.getitem, the collectives' plain
        # code) are pure; a higher-order op (cond, while_loop) may run mutating code
        if schema.is_mutable if schema is not None else not isinstance(
                node.target, (types.BuiltinFunctionType, types.FunctionType)):
            return False
    return True


def _output_builder(out_info: list, is_tensor: list) -> Callable:
    """A function from the compiled flat outputs to the program's result.

    Generated once per cache entry as one expression (``lambda o: (o[0], (o[1], o[2]))``)
    for results made of tuples, lists and dicts; other containers use the pytree.
    """
    o_spec, o_names, consts = out_info
    tensor_index: dict = {}
    for i, flag in enumerate(is_tensor):
        if flag:
            tensor_index[i] = len(tensor_index)

    def box(i: int, flat: Sequence) -> Any:
        if not is_tensor[i]:
            return consts[i]
        x = flat[tensor_index[i]]
        return x if o_names[i] is None else NamedTensor._wrap(x, o_names[i])

    skeleton = tree_unflatten(list(range(len(consts))), o_spec)
    keys: list = []

    def expr(node: Any) -> str | None:
        t = type(node)
        if t is int:
            if not is_tensor[node]:
                return f"C[{node}]"
            k = tensor_index[node]
            return f"o[{k}]" if o_names[node] is None else f"W(o[{k}], N[{node}])"
        if node is None:
            return "None"
        if t is tuple or t is list:
            parts = [expr(x) for x in node]
            if any(p is None for p in parts):
                return None
            body = ", ".join(parts)
            if t is list:
                return f"[{body}]"
            return f"({body},)" if parts else "()"
        if t is dict:
            parts = [expr(x) for x in node.values()]
            if any(p is None for p in parts):
                return None
            keys.append(list(node))
            j = len(keys) - 1
            return "{" + ", ".join(f"K[{j}][{m}]: {p}" for m, p in enumerate(parts)) + "}"
        return None

    code = expr(skeleton)
    if code is None:
        n = len(consts)
        return lambda flat: tree_unflatten([box(i, flat) for i in range(n)], o_spec)
    env = {"W": NamedTensor._wrap, "C": consts, "N": o_names, "K": keys}
    return eval(f"lambda o: {code}", env)  # noqa: S307 - code built above from indices
