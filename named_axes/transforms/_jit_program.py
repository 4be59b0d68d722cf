"""One ``nx.jit`` program: the function traced into an aten graph, checked, compiled.

:func:`compile_program` traces the function on fake tensors (tracing must not run it:
it may mutate its inputs), refuses what a compiled program could not carry
(``_trace_probe``), compiles the graph (``_backend``) and returns a :class:`Program`:
the compiled function of the flat tensor inputs, and the code that turns its flat
outputs back into the function's result.  :func:`load_stored` gives a program from the
program store instead (``_store``).

A differentiable program that communicates (a mesh call's rank program) or applies a
custom rule has its backward in autograd Functions, not in the aten ops, which AOT
autograd would differentiate anew, wrongly.  It is traced once *with* its backward
(:func:`joint_function`), the joint graph cut in two (:func:`split_joint`), and
:class:`_Joint` runs the two programs; where that cannot be done (:func:`_joint_program`)
it runs inline.  The compiled backward is first-order only, as torch.compile's.

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
from typing import Any, Callable, NamedTuple

import torch
from torch.autograd.function import once_differentiable
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .._errors import AxisTypeError
from .._tensor import NamedTensor
from .._torch_private import (is_functional_collective, op_schema, tree_flatten, tree_unflatten,
                              uncached_fake_mode)
from . import _store
from ._backend import (Backend, _differentiable, compile_boxed, constants, grad_constants,
                       outputs)
from ._graph import TENSOR, rebuild_output, trace_flat
from ._jit_keys import tensor_guard
from ._trace_probe import (TraceProbe, check_grads_untouched, check_no_stale_numbers,
                           closed_over_check, refusing_optimizer_steps, watching_modules)
from ._tree import unbox

__all__ = ["Program", "compile_program", "stored_ok", "load_stored", "split_joint",
           "outside_dynamo"]

_NT = NamedTensor
_Tensor = torch.Tensor
_FunctionNode = torch.autograd.function.FunctionCtx   # (a Function's node is its ctx)


class Program(NamedTuple):
    """One compiled program of a jitted function (``compiled`` None: run inline).

    ``tensor_pos`` picks the tensor leaves out of the flat leaves (None: all of them);
    ``rebuild`` turns the flat outputs into the result; ``pure``: it mutates nothing;
    ``values``: it ran a backward while traced, so it runs with grad disabled and serves
    calls whatever their inputs' ``requires_grad``."""
    compiled: Callable | None
    tensor_pos: Any
    rebuild: Callable
    pure: bool
    values: bool
    stored: bool = False   # loaded from the program store, or handed to it
    # True while the modules and tensors the program closed over are as it traced them
    closed: Callable | None = None

    def holds(self) -> bool:
        """Whether this program may run now (its closed-over state is unchanged)."""
        return self.closed is None or self.closed()


def compile_program(fun: Callable, args: tuple, static: tuple, backend: Backend,
                    ident: Any = None) -> Program:
    """Trace and compile ``fun`` for ``args`` (positions ``static`` baked in) into a
    :class:`Program`, under the compile lock.  ``ident``: the call's identity in the
    program store (``_store.identify``); a program whose results are values, that
    mutates nothing and closes over no tensor the trace made is compiled into it."""
    dyn_fun, dyn_args = _bind_static(fun, args, static)
    name = getattr(fun, "__name__", "fun")
    with _store.compile_lock:
        gm, leaves, tensor_pos, out_info, values, modules, rules = _trace(name, dyn_fun, dyn_args)
        consts = constants(gm)
        closed = closed_over_check(consts, tensor_guard(consts) if consts else None, modules)
        example = [leaves[i] for i in tensor_pos]
        pos = None if len(tensor_pos) == len(leaves) else tensor_pos
        rebuild, pure = _output_builder(out_info), _pure(gm)
        if any(isinstance(v, torch.Tensor) and v.device.type == "xla"  # torch-xla compiles
               for v in [*consts, *(n.meta.get("val") for n in gm.graph.nodes)]):  # (jit)
            return Program(None, pos, rebuild, pure, False, closed=closed)
        differentiable = not values and _differentiable(gm, example)
        if differentiable and (rules or _communicates(gm)):   # cut in two, or run inline
            joint = None
            if pure and not grad_constants(gm):
                joint = _joint_program(dyn_fun, dyn_args, example, gm, backend)
            return Program(joint, pos, rebuild, joint is not None, False, closed=closed)
        where = None if ident is None else _store.closed_over_positions(constants(gm), ident)
        stored = (where is not None and not differentiable and pure
                  and out_info[:2] == ident.out_info[:2]
                  and repr(out_info[2]) == repr(ident.out_info[2]))
        if stored:   # compiled for later processes at exit
            _store.save_later(gm, example, ident, where)
        try:
            compiled = compile_boxed(gm, example, backend, values)
        except AssertionError:   # (inductor, on the symbol a number read from a tensor is)
            if not any(torch.Tag.data_dependent_output in getattr(n.target, "tags", ())
                       for n in gm.graph.nodes):
                raise
            raise _value_needed(name, "an .item()") from None
        return Program(compiled, pos, rebuild, pure, values, stored, closed)


def _bind_static(fun: Callable, args: tuple, static: tuple) -> tuple:
    """``(dyn_fun, dyn_args)``: ``fun`` with the arguments at ``static`` fixed, the others."""
    n = len(args)
    st = {i % n for i in static}
    if not st:
        return fun, args
    st_args = {i: args[i] for i in st}

    def dyn_fun(*dyn):
        it = iter(dyn)
        return fun(*[st_args[i] if i in st else next(it) for i in range(n)])

    return dyn_fun, tuple(a for i, a in enumerate(args) if i not in st)


def _trace(name: str, dyn_fun: Callable, dyn_args: tuple, fake_mode: Any = None) -> tuple:
    """``(gm, leaves, tensor_pos, out_info, values, modules, rules)``: ``dyn_fun`` traced
    on fake tensors, with what a compiled program could not carry refused; ``values``: a
    backward ran while traced; ``modules``: the ``nn.Module``s it called; ``rules``: see
    :func:`_own_backward`.

    A trace failing on forward AD's layout assert (a torch bug with the fake-tensor
    dispatch cache) is traced once more without that cache (not always without it:
    forward mode's zero Hessians then come back as meta tensors)."""
    probe = TraceProbe()
    inputs: list = []
    had: dict = {}   # id(input) -> the .grad it came with (a fake copy of its real one)
    modules: dict = {}
    rules = [False]

    def traced(*a):
        inputs[:] = [x._data if type(x) is _NT else x for x in tree_flatten(a)[0]
                     if type(x) is _NT or isinstance(x, _Tensor)]
        had.update((id(t), t.grad) for t in inputs if t.is_leaf)
        with probe, watching_modules(modules):
            out = dyn_fun(*a)
        rules[0] = _own_backward(out)
        return out

    try:
        with refusing_optimizer_steps(name):
            gm, leaves, (_, _, tensor_pos), out_info = trace_flat(
                traced, dyn_args, mode="fake", fake_mode=fake_mode)
    except GuardOnDataDependentSymNode as e:
        raise _value_needed(name, str(e)) from None
    except (RuntimeError, ValueError) as e:   # (a NamedAxisError may carry torch's message)
        if fake_mode is not None or "has_fw_view" not in str(e):
            raise
        gm = None
    finally:
        probe.restore()
    if gm is None:
        return _trace(name, dyn_fun, dyn_args, uncached_fake_mode())
    check_grads_untouched(name, inputs + constants(gm), had)
    check_no_stale_numbers(name, probe)
    return gm, leaves, tensor_pos, out_info, probe.ran, list(modules.values()), rules[0]


def _own_backward(result: Any) -> bool:
    """Whether the autograd graph of the traced ``result`` goes through a Function whose
    backward is its own (a custom rule, a user's ``torch.autograd.Function``), which AOT
    autograd, differentiating the traced aten ops anew, would drop."""
    stack = [t.grad_fn for t in (x._data if type(x) is _NT else x for x in tree_flatten(result)[0])
             if isinstance(t, _Tensor)]
    seen: set = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, _FunctionNode) and not getattr(node, "aot_derivative", False):
            return True
        stack.extend(n for n, _ in node.next_functions)
    return False


def _value_needed(name: str, why: str) -> AxisTypeError:
    """The error for a program that reads a traced tensor's value as a Python value."""
    text = (why.strip().splitlines() or ["a value"])[0].split(" (unhinted")[0]
    return AxisTypeError(
        f"jit({name}): the program needs a tensor's value as a Python value ({text}): an "
        f"if on a tensor, bool(), int(), float() or .item() of one, or such a number "
        f"returned; the trace has no values. Keep the value on tensors (torch.where, nx.lax.cond / "
        f"select on a tensor predicate), pass it as a static argument (static_argnums), "
        f"or run the program eagerly (nx.disable_jit)")


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
    consts = ident.closed_over
    closed = closed_over_check(consts, tensor_guard(consts) if consts else None, ident.modules)
    return Program(compiled, None if len(pos) == len(leaves) else pos,
                   _output_builder(ident.out_info), True, False, True, closed)


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


def _output_builder(out_info: list) -> Callable:
    """A function from the compiled flat outputs to the program's result, generated as
    one expression (``lambda o: (o[0], (o[1], o[2]))``) for results made of tuples,
    lists and dicts; other containers take the pytree."""
    o_spec, o_names, consts = out_info
    index: dict = {}   # leaf -> its position among the tensor outputs
    for i, c in enumerate(consts):
        if c is TENSOR:
            index[i] = len(index)
    keys: list = []

    def expr(node: Any) -> str | None:
        t = type(node)
        if t is int:
            if node not in index:
                return f"C[{node}]"
            k = index[node]
            return f"o[{k}]" if o_names[node] is None else f"W(o[{k}], N[{node}])"
        if node is None:
            return "None"
        if t is not tuple and t is not list and t is not dict:
            return None
        parts = [expr(x) for x in (node.values() if t is dict else node)]
        if None in parts:
            return None
        if t is dict:
            keys.append(list(node))
            j = len(keys) - 1
            return "{" + ", ".join(f"K[{j}][{m}]: {p}" for m, p in enumerate(parts)) + "}"
        body = ", ".join(parts)
        return f"[{body}]" if t is list else f"({body},)" if parts else "()"

    code = expr(tree_unflatten(list(range(len(consts))), o_spec))
    if code is None:
        return lambda flat: rebuild_output(flat, out_info)
    env = {"W": NamedTensor._wrap, "C": consts, "N": o_names, "K": keys}
    return eval(f"lambda o: {code}", env)  # noqa: S307 - code built above from indices


def joint_function(fun: Callable, n_args: int, diff_outs: list) -> Callable:
    """``fun`` with its backward: ``joint(*args, cotangents)`` returns ``(outputs,
    gradients)`` -- the tensor outputs of ``fun(*args)`` and, for every tensor leaf of
    ``args`` that requires grad, its gradient for those cotangents (zeros where none
    reaches it).  ``diff_outs`` is filled with whether each output requires grad."""
    def joint(*a):
        args, cts = a[:n_args], a[n_args]
        wrt = [x for x in unbox(args)[0] if isinstance(x, _Tensor) and x.requires_grad]
        with torch.enable_grad():
            outs = [o for o in unbox(fun(*args))[0] if isinstance(o, _Tensor)]
            diff_outs[:] = [o.requires_grad for o in outs]
            pairs = [(o, c) for o, c in zip(outs, cts) if o.requires_grad]
            grads = torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs],
                                        allow_unused=True) if pairs else [None] * len(wrt)
        return outs, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, wrt)]

    return joint


def split_joint(gm: torch.fx.GraphModule, n_in: int, n_out: int) -> tuple:
    """``(forward, backward, saved_inputs)`` from a joint graph whose placeholders are
    ``n_in`` inputs then the cotangents and whose outputs are ``n_out`` results then the
    gradients: the backward is every node that reads a cotangent; the forward all
    others, returning the results and the values the backward reads of it.  The
    backward's placeholders: the inputs at ``saved_inputs``, those values, the
    cotangents.

    >>> g = torch.fx.symbolic_trace(lambda x, ct: (x.sin(), ct * x.cos()))
    >>> fwd, bwd, saved_inputs = split_joint(g, n_in=1, n_out=1)
    >>> [n.name for n in fwd.graph.nodes]     # the result, and cos(x) for the backward
    ['x', 'sin', 'cos', 'output']
    >>> [n.name for n in bwd.graph.nodes], saved_inputs   # (x itself is not read there)
    (['saved_cos', 'saved_ct', 'mul', 'output'], [])
    """
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    inputs, cts = placeholders[:n_in], placeholders[n_in:]
    results, grads = outputs(gm)[:n_out], outputs(gm)[n_out:]
    back = set(cts)
    for n in g.nodes:
        if n.op not in ("placeholder", "output") and any(a in back for a in n.all_input_nodes):
            back.add(n)
    read = {a for n in back for a in n.all_input_nodes if a not in back}
    read |= {n for n in grads if n not in back}
    saved_inputs = [inputs.index(n) for n in inputs if n in read]
    saved = [n for n in g.nodes if n in read and n.op not in ("placeholder", "get_attr")]

    fwd, env = torch.fx.Graph(), {}
    for n in g.nodes:
        if n in inputs:
            env[n] = fwd.placeholder(n.name)
            env[n].meta = dict(n.meta)
        elif n.op not in ("placeholder", "output") and n not in back:
            env[n] = fwd.node_copy(n, env.__getitem__)
    fwd.output([env[n] for n in results + saved])

    bwd, benv = torch.fx.Graph(), {}
    for n in [inputs[i] for i in saved_inputs] + saved + cts:
        benv[n] = bwd.placeholder(f"saved_{n.name}")
        benv[n].meta = dict(n.meta)
    for n in g.nodes:   # (the constants it reads: read in place)
        if (n in back and n.op != "placeholder") or (n in read and n.op == "get_attr"):
            benv[n] = bwd.node_copy(n, benv.__getitem__)
    bwd.output([benv[n] for n in grads])
    fwd.eliminate_dead_code()
    bwd.eliminate_dead_code()
    return torch.fx.GraphModule(gm, fwd), torch.fx.GraphModule(gm, bwd), saved_inputs


# _call under torch.compiler.disable, made on first use: importing named_axes imports no
# dynamo
_OUTSIDE_DYNAMO: list = []


def outside_dynamo(fn: Callable, *args):
    """``fn(*args)``, which dynamo does not trace (a graph break where it meets it): for
    compiled code (dynamo would trace a compiled backward's Python wrapper, in-place
    collectives and all) and for a mesh call under torch.compile (``_jit.run_jitted``).

    >>> outside_dynamo(max, 1, 2)
    2
    """
    if not _OUTSIDE_DYNAMO:
        _OUTSIDE_DYNAMO.append(torch.compiler.disable(_call))
    return _OUTSIDE_DYNAMO[0](fn, *args)


def _call(fn: Callable, *args):
    return fn(*args)


class _Joint(torch.autograd.Function):
    """Runs a joint program (:func:`_joint_program`): its forward program in the forward,
    its backward program in the backward."""

    @staticmethod
    def forward(ctx, prog, *xs):
        res = outside_dynamo(prog.forward, list(xs))
        outs, saved = res[:prog.n_out], res[prog.n_out:]
        ctx.prog = prog
        ctx.save_for_backward(*[xs[i] for i in prog.saved_inputs], *saved)
        ctx.mark_non_differentiable(*[o for o, d in zip(outs, prog.diff_outs) if not d])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *cts):
        prog = ctx.prog
        # the compiled backward assumes the traced layouts (nx.jit keys calls on them)
        ins = [t if t.stride() == st else torch.empty_strided(
            t.shape, st, dtype=t.dtype, device=t.device).copy_(t)
            for t, st in zip([*ctx.saved_tensors, *cts], prog.strides)]
        out: list = [None] * prog.n_in
        for i, g in zip(prog.wrt, outside_dynamo(prog.backward, ins)):
            out[i] = g
        return (None, *out)


def _example(v) -> _Tensor:
    """Zeros shaped like the traced value ``v``, with its strides where they address
    exactly its elements (a permutation of a contiguous layout), else contiguous (the
    backward copies such a value into that layout before it runs)."""
    dense, expect = True, 1
    for st, sz in sorted((st, sz) for st, sz in zip(v.stride(), v.shape) if sz != 1):
        dense = dense and st == expect
        expect *= sz
    stride = v.stride() if dense else torch.empty(v.shape).stride()
    return torch.zeros(v.shape, dtype=v.dtype, device=v.device).as_strided(v.shape, stride)


def _joint_program(dyn_fun: Callable, dyn_args: tuple, example: list,
                   gm: torch.fx.GraphModule, backend: Backend) -> Callable | None:
    """The boxed compiled forward and backward of ``dyn_fun`` (its tensor inputs
    ``example``, ``gm`` its traced forward), or None where it is not cut (the module
    docstring)."""
    cts = [torch.zeros(r.shape, dtype=r.dtype, device=r.device)
           for r in (n.meta["val"] for n in outputs(gm))]
    diff_outs: list = []
    try:
        joint = trace_flat(joint_function(dyn_fun, len(dyn_args), diff_outs),
                           (*dyn_args, cts), mode="fake")[0]
    except RuntimeError as e:
        if "meta" not in str(e):
            raise
        # torch's ZeroTensor fallback (forward mode: linearize, jvp) runs ops on meta
        # tensors, and the backward traced here met one beside a fake input: run inline
        return None
    devices = {x.device for x in example}
    if any(v.device not in devices for v in constants(joint)):
        return None   # a meta tensor an engine path handed the fake trace as a value
    if any(n.op == "placeholder" for n in outputs(joint)[:len(cts)]):
        return None   # a result is an input as it is
    fwd, bwd, saved_inputs = split_joint(joint, len(example), len(cts))
    traced = [n.meta.get("val") for n in bwd.graph.nodes if n.op == "placeholder"]
    if not all(isinstance(v, _Tensor) for v in traced):
        return None   # a value the backward reads is no tensor traced with its shape
    back_example = [_example(v) for v in traced]
    prog = types.SimpleNamespace(
        forward=compile_boxed(fwd, example, backend, values=True),
        backward=compile_boxed(bwd, back_example, backend, values=True),
        saved_inputs=saved_inputs, n_in=len(example), n_out=len(cts),
        wrt=[i for i, x in enumerate(example) if x.requires_grad],
        diff_outs=list(diff_outs), strides=[x.stride() for x in back_example])
    return lambda xs: _Joint.apply(prog, *xs)
