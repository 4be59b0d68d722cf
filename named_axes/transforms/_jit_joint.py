"""``nx.jit`` of a differentiable program that communicates: compiled as a forward and a
backward program.

A mesh call's rank program holds torch.distributed's functional collectives, and their
transposes live in the local-shard path's autograd Functions (``parallel/_local_comms``:
the backward of a ``psum`` hands the cotangent on, that of a replicated weight meeting a
split batch all-reduces it), not in the aten ops -- AOT autograd, differentiating the
traced aten graph anew, would get them wrong.  So such a program is traced once *with*
its backward: the function, then ``torch.autograd.grad`` of its tensor outputs for
cotangents given as inputs, which runs those Functions' backward.  The joint graph is
cut in two (:func:`split_joint`): the forward (the outputs, and what the backward reads
of it) and the backward (from those and the cotangents, the inputs' gradients).  Each is
compiled as a program of values, and :class:`_Joint` runs the first in its forward and
the second in its backward -- what AOT autograd does, with the Functions' own backward.

Closed-over tensors that require grad, programs that mutate a tensor, that return an
input as it is, or whose traced backward meets a meta tensor of torch's ZeroTensor
fallback (forward mode inside), are not cut: they run inline.  The compiled backward is
first-order only (a second derivative through it raises torch's error for
``once_differentiable``, as ``torch.compile``'s compiled backward does).

>>> import torch
>>> g = torch.fx.symbolic_trace(lambda x, ct: (x.sin(), ct * x.cos()))
>>> fwd, bwd, saved_inputs = split_joint(g, n_in=1, n_out=1)
>>> [n.name for n in fwd.graph.nodes]     # the result, and cos(x) for the backward
['x', 'sin', 'cos', 'output']
>>> [n.name for n in bwd.graph.nodes], saved_inputs   # (x itself is not read there)
(['saved_cos', 'saved_ct', 'mul', 'output'], [])
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.autograd.function import once_differentiable

from ._graph import trace_flat
from ._tree import unbox

__all__ = ["joint_function", "split_joint", "joint_program", "outside_dynamo"]

_Tensor = torch.Tensor


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


def _copy(graph: torch.fx.Graph, node: torch.fx.Node, env: dict) -> torch.fx.Node:
    new = graph.node_copy(node, lambda a: env[a])
    env[node] = new
    return new


def split_joint(gm: torch.fx.GraphModule, n_in: int, n_out: int) -> tuple:
    """``(forward, backward, saved_inputs)`` from a joint graph whose placeholders are
    ``n_in`` inputs then the cotangents and whose outputs are ``n_out`` results then the
    gradients: the backward is every node that reads a cotangent; the forward all
    others, returning the results and the values the backward reads of it.  The
    backward's placeholders: the inputs at ``saved_inputs``, those values, the
    cotangents."""
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    inputs, cts = placeholders[:n_in], placeholders[n_in:]
    out_node = next(n for n in g.nodes if n.op == "output")
    results, grads = list(out_node.args[0][:n_out]), list(out_node.args[0][n_out:])
    back = set(cts)
    for n in g.nodes:
        if n.op not in ("placeholder", "output") and any(a in back for a in n.all_input_nodes):
            back.add(n)
    read = {a for n in back for a in n.all_input_nodes if a not in back}
    read |= {n for n in grads if n not in back}
    saved_inputs = [inputs.index(n) for n in inputs if n in read]
    consts = [n for n in g.nodes if n in read and n.op == "get_attr"]   # read in place
    saved = [n for n in g.nodes if n in read and n.op not in ("placeholder", "get_attr")]

    fwd, env = torch.fx.Graph(), {}
    for n in g.nodes:
        if n in inputs:
            env[n] = fwd.placeholder(n.name)
            env[n].meta = dict(n.meta)
        elif n.op not in ("placeholder", "output") and n not in back:
            _copy(fwd, n, env)
    fwd.output([env[n] for n in results + saved])

    bwd, benv = torch.fx.Graph(), {}
    for n in [inputs[i] for i in saved_inputs] + saved + cts:
        benv[n] = bwd.placeholder(f"saved_{n.name}")
        benv[n].meta = dict(n.meta)
    for n in consts:
        _copy(bwd, n, benv)
    for n in g.nodes:
        if n in back and n.op != "placeholder":
            _copy(bwd, n, benv)
    bwd.output([benv[n] for n in grads])
    fwd.eliminate_dead_code()
    bwd.eliminate_dead_code()
    return torch.fx.GraphModule(gm, fwd), torch.fx.GraphModule(gm, bwd), saved_inputs


_OUTSIDE_DYNAMO: list = []   # _call under torch.compiler.disable, made on first use
#                             (so that importing named_axes imports no dynamo)


def outside_dynamo(fn: Callable, *args):
    """``fn(*args)``, which dynamo does not trace (a graph break where it meets it).

    For compiled code, which is not dynamo's to trace (a ``.backward()`` that dynamo
    leaves to run eagerly would trace a compiled backward's Python wrapper, in-place
    collectives and all), and for a mesh call under torch.compile (``_jit.run_jitted``).
    Made on first use; under dynamo that first use is itself a graph break.

    >>> outside_dynamo(max, 1, 2)
    2
    """
    if not _OUTSIDE_DYNAMO:
        _OUTSIDE_DYNAMO.append(torch.compiler.disable(_call))
    return _OUTSIDE_DYNAMO[0](fn, *args)


def _call(fn: Callable, *args):
    return fn(*args)


class _Joint(torch.autograd.Function):
    """Runs a :class:`JointProgram`: its forward program in the forward, its backward
    program in the backward."""

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
        ins = [t if t.stride() == st else _laid_out(t, st)
               for t, st in zip([*ctx.saved_tensors, *cts], prog.strides)]
        grads = outside_dynamo(prog.backward, ins)
        out: list = [None] * prog.n_in
        for i, g in zip(prog.wrt, grads):
            out[i] = g
        return (None, *out)


def _laid_out(t: _Tensor, stride: tuple) -> _Tensor:
    """A copy of ``t`` with the strides ``stride``."""
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


class JointProgram:
    """The compiled forward and backward of a differentiable program; called on the flat
    tensor inputs, it returns the flat tensor outputs (a boxed ``nx.jit`` program)."""

    def __init__(self, forward, backward, saved_inputs: list, n_in: int, n_out: int,
                 wrt: list, diff_outs: list, strides: list):
        self.forward, self.backward, self.saved_inputs = forward, backward, saved_inputs
        self.n_in, self.n_out, self.wrt, self.diff_outs = n_in, n_out, wrt, diff_outs
        self.strides = strides   # of the backward's inputs, as traced

    def __call__(self, xs: list) -> tuple:
        return _Joint.apply(self, *xs)


def _example(v) -> _Tensor:
    """Zeros shaped like the traced value ``v``, with its strides where they address
    exactly its elements (else contiguous: the backward copies such a value into that
    layout before it runs)."""
    stride = v.stride() if _dense(v) else torch.empty(v.shape).stride()
    return torch.zeros(v.shape, dtype=v.dtype, device=v.device).as_strided(v.shape, stride)


def _dense(v) -> bool:
    """Whether ``v``'s strides address exactly its elements (a permutation of a
    contiguous layout), so zeros of its shape can take them."""
    dims = sorted((st, sz) for st, sz in zip(v.stride(), v.shape) if sz != 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return False
        expect *= sz
    return True


def _foreign_constants(gm: torch.fx.GraphModule, example: list) -> bool:
    """Whether the traced graph holds a tensor constant on a device none of the inputs is
    on (a meta tensor an engine path handed the fake trace as a value: it has no data)."""
    devices = {x.device for x in example}
    return any(isinstance(v, _Tensor) and v.device not in devices
               for v in (getattr(gm, n.target, None) for n in gm.graph.nodes
                         if n.op == "get_attr"))


def joint_program(dyn_fun: Callable, dyn_args: tuple, example: list, results: list,
                  compile_values: Callable) -> Any:
    """The :class:`JointProgram` of ``dyn_fun`` (its tensor inputs ``example``, its
    traced tensor results' fake values ``results``), or None where it is not cut (the
    module docstring).  ``compile_values(gm, example)`` compiles a graph run with grad
    disabled."""
    cts = [torch.zeros(r.shape, dtype=r.dtype, device=r.device) for r in results]
    diff_outs: list = []
    try:
        gm = trace_flat(joint_function(dyn_fun, len(dyn_args), diff_outs), (*dyn_args, cts),
                        mode="fake")[0]
    except RuntimeError as e:
        if "meta" not in str(e):
            raise
        # torch's ZeroTensor fallback (forward mode: linearize, jvp) runs ops on meta
        # tensors, and the backward traced here met one beside a fake input: run inline
        return None
    n_in, n_out = len(example), len(results)
    if _foreign_constants(gm, example):
        return None   # run inline: a constant the trace could not place on the inputs' device
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    if any(n.op == "placeholder" for n in out_node.args[0][:n_out]):
        return None   # a result is an input as it is
    fwd, bwd, saved_inputs = split_joint(gm, n_in, n_out)
    wrt = [i for i, x in enumerate(example) if x.requires_grad]
    if any(not isinstance(n.meta.get("val"), _Tensor)
           for n in bwd.graph.nodes if n.op == "placeholder"):
        return None   # a value the backward reads is no tensor traced with its shape
    back_example = [_example(n.meta["val"]) for n in bwd.graph.nodes if n.op == "placeholder"]
    forward = compile_values(fwd, [x.detach() for x in example])
    backward = compile_values(bwd, back_example)
    return JointProgram(forward, backward, saved_inputs, n_in, n_out, wrt, list(diff_outs),
                        [x.stride() for x in back_example])
