"""Custom derivative rules, JAX style, on ``torch.autograd.Function``.

``custom_vjp`` / ``custom_jvp`` wrap a function whose derivative the user supplies; both
are ``autograd.Function``s with ``setup_context`` and ``generate_vmap_rule``, so they
compose with torch.func (grad, vmap, jvp) and with the named dispatcher.  A custom
JVP rule is reverse-differentiated by transposing it with ``torch.func.vjp`` (it is
linear in the tangents), as JAX does — never re-derived by hand.

>>> import torch, named_axes as nx
>>> @nx.custom_vjp
... def clip_grad(x):
...     return x
>>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (g.clamp(-1, 1),))
>>> nx.grad(lambda x: (3 * clip_grad(x)).sum())(torch.ones(2))
tensor([1., 1.])
"""
from __future__ import annotations

import functools
import math
import threading
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from .._env import bound_axes, frames, within
from .._errors import AxisSpecError, AxisTypeError
from .._layout import align
from .._tensor import NamedTensor
from .._torch_func import ORIGINAL as _functorch
from . import _instances
from ._tree import rebox, unbox

__all__ = ["custom_vjp", "custom_jvp", "closure_convert"]

_NT = NamedTensor


def _split(args: tuple, nondiff: tuple):
    """Physical tensors of the differentiable arguments, and how to rebuild all."""
    diff_pos = [i for i in range(len(args)) if i not in nondiff]
    leaves, spec, names = unbox(tuple(args[i] for i in diff_pos))
    return diff_pos, leaves, spec, names


def _like(g: Any, like: torch.Tensor, names: tuple | None, what: str):
    """A gradient laid out as the physical tensor ``like`` (named ``names``)."""
    if g is None:
        return None
    names = names or ()
    if isinstance(g, _NT):
        extra = [n for n in g._names if n not in names]
        if extra:
            raise AxisSpecError(f"{what}: the gradient has named axis {extra[0]!r} that the "
                                f"input (named axes {names}) lacks")
        g = align(g._data, g._names, g.ndim, names, like.dim() - len(names))
    g = torch.as_tensor(g, dtype=like.dtype, device=like.device)
    return g.expand(like.shape) if g.shape != like.shape else g


def _per_instance(g: torch.Tensor, names: tuple, axes: dict) -> NamedTensor:
    """A cotangent summed over the instances of ``axes`` that its output lacks, as each
    instance's share: divided by their number, one copy per instance."""
    lack = _instances.lacking(axes, names)
    if not lack:
        return g
    sizes = tuple(lack.values())
    share = g / math.prod(sizes)
    return NamedTensor._wrap(share.expand(sizes + tuple(share.shape)), tuple(lack) + names)


def _summed_back(g: Any, names: tuple, axes: dict, inner_mode: bool) -> Any:
    """A ``bwd`` result for an input named ``names``, in the physical convention: its
    instances of the axes the input lacks summed (a replicated result, inside a
    differentiated region, counting once per instance)."""
    if not isinstance(g, _NT):
        if inner_mode and isinstance(g, torch.Tensor):
            scale = math.prod(_instances.lacking(axes, names).values())
            return g * scale if scale != 1 else g
        return g
    extra = tuple(n for n in g._names if n not in names)
    if extra:
        dims = [g._names.index(n) for n in extra]
        g = NamedTensor._wrap(g._data.sum(dims), tuple(n for n in g._names if n not in extra))
    if inner_mode:
        scale = math.prod(s for n, s in _instances.lacking(axes, names).items()
                          if n not in extra)
        if scale != 1:
            g = NamedTensor._wrap(g._data * scale, g._names)
    return g


class custom_vjp:
    """A function with a user-supplied VJP: ``f.defvjp(fwd, bwd)``.

    ``fwd(*args) -> (out, residuals)``; ``bwd(*nondiff_args, residuals, g) -> tuple``
    with one cotangent per differentiable argument (``None`` for no gradient).
    Arguments may be NamedTensors; the output is a tensor or NamedTensor.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()) -> None:
        if not callable(fun):
            raise AxisTypeError(f"custom_vjp: fun must be callable, got {type(fun).__name__}")
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        self._in_fwd = threading.local()   # depth of this function's fwd on the stack
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Set the forward (returning residuals) and backward rules."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise AxisTypeError(f"custom_vjp({self.__name__}): call defvjp(fwd, bwd) first")
        if getattr(self._in_fwd, "depth", 0):   # fwd calls the function itself: its value
            return self.fun(*args)
        call = _Call(self, args)
        # Per-instance cotangents (see _instances): the axes of the differentiated
        # region around this call, or, outside one, the axes bound here.
        call.region = _instances.current()
        if call.region is not None and torch.compiler.is_compiling():
            # dynamo traces bwd while the forward is traced, before the region knows its
            # axes: the cotangent shares came out wrong (half, for an axis of size 2)
            raise AxisTypeError(
                f"custom_vjp({self.__name__}) inside nx.grad cannot be traced by "
                f"torch.compile yet: compile the step with nx.jit instead (or call "
                f"torch.compile on the function without nx.grad around this call)")
        call.bound = bound_axes()
        call.scope = list(frames())   # bwd runs in this environment, wherever autograd is
        out = _VjpFunction.apply(call, *call.leaves)
        o_spec, o_names = call.box["out"]
        return rebox(list(out), o_spec, o_names)


class _Call:
    """One call of a custom_vjp / custom_jvp function: its arguments, how the
    differentiable ones are laid out physically, and what the forward left (``box``).
    The autograd.Function classes are defined once (dynamo cannot trace a class
    definition) and get this object as their first argument."""

    def __init__(self, me, args: tuple) -> None:
        self.me, self.args = me, args
        self.nd = tuple(i % len(args) for i in me.nondiff_argnums)
        self.diff_pos, self.leaves, self.spec, self.names = _split(args, self.nd)
        self.box: dict = {}

    def keep(self, out, **extra) -> tuple:
        """Note a forward's output structure (and ``extra``) in ``box``; its tensor leaves."""
        o_leaves, o_spec, o_names = unbox(out)
        self.box["out"] = (o_spec, o_names)
        self.box.update(extra)
        return tuple(o_leaves)

    def rebuild(self, phys) -> list:
        call = list(self.args)
        for i, a in zip(self.diff_pos, rebox(phys, self.spec, self.names)):
            call[i] = a
        return call

    def tangent_phys(self, prim_phys, tan_phys) -> tuple:
        """A custom_jvp rule's output tangent, physical, as a function of the tangents."""
        me = self.me
        prim = self.rebuild(prim_phys)
        tan = [None] * len(self.args)
        for i, a in zip(self.diff_pos, rebox(tan_phys, self.spec, self.names)):
            tan[i] = a
        _, t_out = me.rule(tuple(prim), tuple(tan))
        o_spec, o_names = self.box["out"]
        t_leaves = tree_flatten(t_out)[0]
        data = unbox(self.box["out_value"])[0]
        return tuple(_like(t, d, n, f"custom_jvp({me.__name__}) rule")
                     for t, d, n in zip(t_leaves, data, o_names))


class _VjpFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(call, *phys):
        me = call.me
        state = me._in_fwd
        state.depth = getattr(state, "depth", 0) + 1
        try:
            out, res = me.fwd(*call.rebuild(phys))
        finally:
            state.depth -= 1
        return call.keep(out, res=res)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.call = inputs[0]
        ctx.res = inputs[0].box["res"]

    @staticmethod
    def backward(ctx, *gs):
        call = ctx.call
        me, region = call.me, call.region
        o_spec, o_names = call.box["out"]
        axes = region.axes if region is not None else call.bound
        inner_mode = region is not None
        g = rebox([_per_instance(gi, ni or (), axes) for gi, ni in zip(gs, o_names)],
                  o_spec, [ni if ni is not None else () for ni in o_names])
        nondiff = [call.args[i] for i in call.nd]
        with within(call.scope):
            grads = me.bwd(*nondiff, ctx.res, g)
        if not isinstance(grads, (tuple, list)):
            raise AxisTypeError(f"custom_vjp({me.__name__}): bwd must return a tuple "
                                f"with one entry per differentiable argument")
        flat = tree_flatten(list(grads), is_leaf=lambda x: x is None)[0]
        if len(flat) != len(call.leaves):
            raise AxisSpecError(f"custom_vjp({me.__name__}): bwd returned "
                                f"{len(flat)} cotangents for {len(call.leaves)} "
                                f"differentiable inputs")
        return (None,) + tuple(
            _like(_summed_back(gi, ni or (), axes, inner_mode), li, ni,
                  f"custom_vjp({me.__name__}) bwd")
            if isinstance(li, torch.Tensor) else None
            for gi, li, ni in zip(flat, call.leaves, call.names))


class custom_jvp:
    """A function with a user-supplied JVP: ``f.defjvp(rule)`` or ``f.defjvps(*fns)``.

    ``rule(primals, tangents) -> (out, tangent_out)``; ``defjvps`` gives one function
    ``(tangent_i, out, *primals) -> contribution`` per argument (None: no dependence).
    Reverse mode transposes the rule (it is linear in the tangents).
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()) -> None:
        if not callable(fun):
            raise AxisTypeError(f"custom_jvp: fun must be callable, got {type(fun).__name__}")
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.rule = None
        functools.update_wrapper(self, fun)

    def defjvp(self, rule: Callable) -> Callable:
        """Set the JVP rule ``rule(primals, tangents) -> (out, tangent_out)``."""
        self.rule = rule
        return rule

    def defjvps(self, *fns: Callable | None) -> None:
        """Set the JVP from one function per argument, summed (JAX's ``defjvps``)."""
        fun = self.fun

        def rule(primals, tangents):
            out = fun(*primals)
            total = None
            for f, t in zip(fns, tangents):
                if f is None:
                    continue
                part = f(t, out, *primals)
                total = part if total is None else total + part
            return out, total if total is not None else out * 0
        self.rule = rule

    def __call__(self, *args):
        if self.rule is None:
            raise AxisTypeError(f"custom_jvp({self.__name__}): call defjvp(rule) first")
        call = _Call(self, args)
        # dynamo traces no autograd.Function with a jvp method: under torch.compile the
        # rule serves reverse mode only (forward mode there raises torch's error)
        fn = _JvpReverse if torch.compiler.is_compiling() else _JvpFunction
        out = fn.apply(call, *call.leaves)
        o_spec, o_names = call.box["out"]
        return rebox(list(out), o_spec, o_names)


class _JvpReverse(torch.autograd.Function):
    """custom_jvp's Function for reverse mode: the rule transposed (``backward``)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(call, *phys):
        out = call.me.fun(*call.rebuild(phys))
        return call.keep(out, out_value=out)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*[x for x in inputs[1:] if isinstance(x, torch.Tensor)])
        ctx.call = inputs[0]
        ctx.inputs = inputs[1:]

    @staticmethod
    def backward(ctx, *gs):
        prim = list(ctx.inputs)
        zeros = [torch.zeros_like(p) if isinstance(p, torch.Tensor) else p for p in prim]
        _, pull = _functorch["vjp"](lambda *t: ctx.call.tangent_phys(prim, list(t)), *zeros)
        return (None,) + tuple(pull(tuple(gs)))


class _JvpFunction(_JvpReverse):
    """custom_jvp's Function: the rule itself in forward mode, transposed in reverse."""

    @staticmethod
    def jvp(ctx, _call_tangent, *tangents):
        return ctx.call.tangent_phys(list(ctx.inputs), list(tangents))


def closure_convert(fun: Callable, *example_args: Any):
    """Hoist the tensors ``fun`` closes over into explicit arguments.

    Returns ``(converted, consts)`` with ``converted(*args, *consts) == fun(*args)``; the
    constants are found by tracing ``fun`` on ``example_args`` (``make_fx``), so gradients
    with respect to them can flow (e.g. through a :class:`custom_vjp`).

    >>> import torch, named_axes as nx
    >>> w = torch.tensor([2., 3.])
    >>> f, consts = nx.closure_convert(lambda x: x * w, torch.ones(2))
    >>> f(torch.ones(2), *consts)
    tensor([2., 3.])
    """
    from ._graph import rebuild_output, trace_flat

    gm, leaves, (_, _, tensor_pos), out_info = trace_flat(fun, example_args)
    consts = []
    graph = gm.graph
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    for node in list(graph.nodes):
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, torch.Tensor):
                with graph.inserting_before(first):
                    ph = graph.placeholder(f"const_{len(consts)}")
                node.replace_all_uses_with(ph)
                graph.erase_node(node)
                consts.append(value)
    graph.lint()
    gm.recompile()
    n_args = len(example_args)

    def converted(*args):
        if len(args) != n_args + len(consts):
            raise AxisSpecError(f"closure_convert: expected {n_args} arguments and "
                                f"{len(consts)} constants, got {len(args)} values")
        a_leaves = unbox(tuple(args[:n_args]))[0]
        phys = [a_leaves[i] for i in tensor_pos]
        cs = [c._data if isinstance(c, _NT) else c for c in args[n_args:]]
        return rebuild_output(gm(*phys, *cs), out_info)

    return converted, consts
