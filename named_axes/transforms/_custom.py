"""Custom derivative rules, JAX style, on ``torch.autograd.Function``.

Both are ``autograd.Function``s with ``setup_context`` and ``generate_vmap_rule``, so
they compose with torch.func, the named dispatcher and torch.compile.  A custom JVP rule
is reverse-differentiated by transposing it with ``torch.func.vjp``, as JAX does.

>>> import torch, named_axes as nx
>>> @nx.custom_vjp
... def clip_grad(x):
...     return x
>>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (g.clamp(-1, 1),))
>>> nx.grad(lambda x: (3 * clip_grad(x)).sum())(torch.ones(2))
tensor([1., 1.])
"""
from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any, Callable, Sequence

import torch

from .._engine import split_over_ranks
from .._env import bound_axes, frames, within
from .._errors import AxisSpecError, AxisTypeError
from .._tensor import NamedTensor
from .._tape import TAPES, aliased, noted_rule, suspended, transposed
from .._levels import ORIGINAL as _functorch
from .._torch_private import tree_flatten
from . import _instances
from ._tree import align_like, rebox, unbox

__all__ = ["custom_vjp", "custom_jvp", "closure_convert"]

_NT = NamedTensor


def _like(g: Any, like: torch.Tensor, names: tuple | None, what: str):
    """A gradient or tangent laid out as the physical tensor ``like`` (named ``names``),
    in its dtype (:func:`._tree.align_like`)."""
    g = align_like(g, like, names, what)
    return None if g is None else torch.as_tensor(g, dtype=like.dtype, device=like.device)


def _per_instance(g: torch.Tensor, names: tuple, axes: dict) -> NamedTensor:
    """A cotangent summed over the instances of ``axes`` that its output lacks, as each
    instance's share: divided by their number, one copy per instance."""
    lack = {n: s for n, s in axes.items() if n not in names}
    if not lack:
        return g
    sizes = tuple(lack.values())
    share = g / _instances.instance_count(axes, names)
    return NamedTensor._wrap(share.expand(sizes + tuple(share.shape)), tuple(lack) + names)


def _summed_back(g: Any, names: tuple, axes: dict, inner_mode: bool) -> Any:
    """A ``bwd`` result for an input named ``names``, physical: its instances of the axes
    the input lacks summed (inside a differentiated region, once per instance)."""
    extra = ()
    if isinstance(g, _NT):
        extra = tuple(n for n in g._names if n not in names)
        # the instances on other ranks too, where a mesh splits an axis
        split = tuple(n for n in extra if split_over_ranks(n))
        if split:
            from ..lax import psum

            g = psum(g, split)
        rest = tuple(n for n in extra if n not in split)
        if rest:
            g = NamedTensor._wrap(g._data.sum([g._names.index(n) for n in rest]),
                                  tuple(n for n in g._names if n not in rest))
    scale = _instances.instance_count(axes, names, extra) if inner_mode else 1
    if scale == 1 or not isinstance(g, (_NT, torch.Tensor)):
        return g
    return NamedTensor._wrap(g._data * scale, g._names) if type(g) is _NT else g * scale


class _CustomRule:
    """What :class:`custom_vjp` and :class:`custom_jvp` share: the function (whose name
    and docstring they take), and which arguments are not differentiated."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()) -> None:
        if not callable(fun):
            raise AxisTypeError(f"{type(self).__name__}: fun must be callable, got "
                                f"{type(fun).__name__}")
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        functools.update_wrapper(self, fun)


class custom_vjp(_CustomRule):
    """A function with a user-supplied VJP: ``f.defvjp(fwd, bwd)``.

    ``fwd(*args) -> (out, residuals)``; ``bwd(*nondiff_args, residuals, g) -> tuple``
    with one cotangent per differentiable argument (``None`` for no gradient).
    Arguments may be NamedTensors; the output is a tensor or NamedTensor.  With grad
    mode off (nothing records a derivative, as inside ``fwd``) a call runs ``fun``.
    """

    fwd = bwd = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Set the forward (returning residuals) and backward rules."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise AxisTypeError(f"custom_vjp({self.__name__}): call defvjp(fwd, bwd) first")
        if not torch.is_grad_enabled():   # (as inside fwd, which may call the function)
            return self.fun(*args)
        call = _Call(self, args)
        region = _instances.current()
        call.inner_mode = region is not None
        call.axes = (region.axes_for_rule(f"custom_vjp({self.__name__})")
                     if region is not None else bound_axes())
        out = _apply(_VjpFunction, call)
        if not torch.compiler.is_dynamo_compiling() and TAPES:   # (bwd's edges: _tape)
            call.noted = noted_rule(tree_flatten([call.args[i] for i in call.diff_pos])[0],
                                    tree_flatten(out)[0])
        return out


def _apply(function, call) -> Any:
    """The output of ``function.apply`` (a rule's ``autograd.Function``) on the call's
    inputs.  Under dynamo no tape sees inside (its subgraphs allow no Python state
    change), and the inputs are fresh views: dynamo traces a Function applied to a tensor
    ``torch.func.grad`` differentiates as its plain forward, dropping the rule
    (pytorch/pytorch#193279); a view requires grad as it should."""
    inputs = call.leaves
    compiling = torch.compiler.is_dynamo_compiling()
    if compiling:
        inputs = [t.view_as(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    with suspended() if compiling and TAPES else contextlib.nullcontext():
        *out, o = function.apply(call, *inputs)
    return rebox(out, o.spec, o.names)


class _Out:
    """A rule's forward result besides its tensors (the output's structure; ``extra``:
    custom_vjp's residuals, custom_jvp's output), the Function's last output: dynamo
    fails on a forward with a Python side effect inside ``torch.func.grad``."""

    __slots__ = ("spec", "names", "extra")

    def __init__(self, spec, names: list, extra: Any) -> None:
        self.spec, self.names, self.extra = spec, names, extra


class _Call:
    """One call of a custom_vjp / custom_jvp function: its arguments and how the
    differentiable ones are laid out physically (the Functions' first argument)."""

    def __init__(self, me, args: tuple) -> None:
        self.me, self.args = me, args
        self.nd = tuple(i % len(args) for i in me.nondiff_argnums)
        self.diff_pos = [i for i in range(len(args)) if i not in self.nd]
        self.leaves, self.spec, self.names = unbox(tuple(args[i] for i in self.diff_pos))
        self.noted: list = []   # the tapes that noted this call (named_axes._tape)
        self.scope = list(frames())   # the backward runs here, wherever autograd runs it

    @staticmethod
    def keep(out, extra) -> tuple:
        """A forward's outputs: the tensor leaves of ``out``, then its :class:`_Out`."""
        o_leaves, o_spec, o_names = unbox(out)
        return (*o_leaves, _Out(o_spec, o_names, extra))

    def rebuild(self, phys, base: list | None = None) -> list:
        """``base`` (default: the arguments) with the differentiable ones from ``phys``."""
        call = list(self.args if base is None else base)
        for i, a in zip(self.diff_pos, rebox(phys, self.spec, self.names)):
            call[i] = a
        return call

    def rule_phys(self, prim_phys, tan_phys, out: _Out) -> tuple:
        """A custom_jvp rule's output tangent, physical, laid out as the forward's
        ``out``; with ``tan_phys`` None its primal output instead, the tangents zero (a
        function of the primals)."""
        primal = tan_phys is None
        if primal:
            tan_phys = [a * 0 if isinstance(a, torch.Tensor) else a for a in prim_phys]
        p_out, t_out = self.me.rule(tuple(self.rebuild(prim_phys)),
                                    tuple(self.rebuild(tan_phys, [None] * len(self.args))))
        return tuple(_like(t, d, n, f"custom_jvp({self.me.__name__}) rule")
                     for t, d, n in zip(tree_flatten(p_out if primal else t_out)[0],
                                        unbox(out.extra)[0], out.names))


class _VjpFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(call, *phys):
        # grad off, as autograd runs every forward (dynamo may inline it with grad on):
        # fwd may call the function itself, which then gives its value
        noted = not torch.compiler.is_dynamo_compiling() and TAPES   # as a whole, not op by op
        with torch.no_grad(), suspended() if noted else contextlib.nullcontext():
            out, res = call.me.fwd(*call.rebuild(phys))
        return call.keep(out, res)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.call = inputs[0]
        ctx.out = output[-1]

    @staticmethod
    def backward(ctx, *gs):
        call, o = ctx.call, ctx.out
        me, axes, inner_mode = call.me, call.axes, call.inner_mode
        g = rebox([_per_instance(gi, ni or (), axes) for gi, ni in zip(gs, o.names)],
                  o.spec, [ni if ni is not None else () for ni in o.names])
        nondiff = [call.args[i] for i in call.nd]
        with within(call.scope):   # (the summing back reads the mesh's engine too)
            grads = transposed(call.noted, tree_flatten(g)[0],
                               lambda: me.bwd(*nondiff, o.extra, g))
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


class custom_jvp(_CustomRule):
    """A function with a user-supplied JVP: ``f.defjvp(rule)`` or ``f.defjvps(*fns)``.

    ``rule(primals, tangents) -> (out, tangent_out)``; ``defjvps`` gives one function
    ``(tangent_i, out, *primals) -> contribution`` per argument (None: no dependence).
    Reverse mode transposes the rule (it is linear in the tangents).
    """

    rule = None

    def defjvp(self, rule: Callable) -> Callable:
        """Set the JVP rule ``rule(primals, tangents) -> (out, tangent_out)``."""
        self.rule = rule
        return rule

    def defjvps(self, *fns: Callable | None) -> None:
        """Set the JVP from one function per argument, summed (JAX's ``defjvps``)."""
        fun = self.fun

        def rule(primals, tangents):
            out = fun(*primals)
            parts = [f(t, out, *primals) for f, t in zip(fns, tangents) if f is not None]
            return out, functools.reduce(operator.add, parts) if parts else out * 0
        self.rule = rule

    def __call__(self, *args):
        if self.rule is None:
            raise AxisTypeError(f"custom_jvp({self.__name__}): call defjvp(rule) first")
        call = _Call(self, args)
        # dynamo traces no autograd.Function with a jvp method: under torch.compile the
        # rule serves reverse mode only, and forward mode around the call is refused
        compiling = torch.compiler.is_dynamo_compiling()
        if compiling and FORWARD_REGIONS:
            raise AxisTypeError(
                f"custom_jvp({self.__name__}) under torch.compile inside nx.jvp (or jacfwd, "
                f"hessian, linearize): dynamo cannot trace the rule's forward mode, and "
                f"without it the derivative would be fun's own; call it eagerly or under "
                f"nx.jit, or differentiate it in reverse mode (nx.grad / nx.vjp)")
        region = _instances.current()
        if compiling and region is not None:   # its transpose has a limit there (nx.vjp)
            region.transposed.append(f"custom_jvp({self.__name__})")
        fn = _JvpReverse if compiling else _JvpFunction
        out = _apply(fn, call)
        if not compiling and TAPES:   # the Function's outputs are fun's, as tapes saw them
            aliased(tree_flatten(getattr(call, "fun_out", None))[0], tree_flatten(out)[0])
        return out


# The running nx.jvp / jacfwd calls, innermost last, each by its number (FORWARD_CALLS
# counts them): a custom_jvp applied inside one and differentiated in reverse after it
# returned is differentiated as the rule's code (_JvpReverse.backward)
FORWARD_REGIONS: list = []
FORWARD_CALLS = [0]


def forward_begin() -> None:
    """Forward mode starts (functions, not a context manager: dynamo traces them inside
    torch.compile)."""
    FORWARD_CALLS[0] += 1
    FORWARD_REGIONS.append(FORWARD_CALLS[0])


def forward_end() -> None:
    FORWARD_REGIONS.pop()


class _JvpReverse(torch.autograd.Function):
    """custom_jvp's Function for reverse mode: the rule transposed (``backward``)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(call, *phys):
        args = call.rebuild(phys)
        if TAPES:   # (dynamo: no tape open, nothing written on call)
            # fun's ops are noted: its inputs are the call's, as other objects (a
            # torch.func transform hands forward its inputs unwrapped)
            aliased(tree_flatten(call.args)[0], tree_flatten(args)[0])
        out = call.me.fun(*args)
        if TAPES:
            call.fun_out = out
        return call.keep(out, out)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*[x for x in inputs[1:] if isinstance(x, torch.Tensor)])
        ctx.call = inputs[0]
        ctx.inputs = inputs[1:]
        ctx.out = output[-1]
        ctx.region = FORWARD_REGIONS[-1] if FORWARD_REGIONS else None

    @staticmethod
    def backward(ctx, *gs):
        prim, o, call = list(ctx.inputs), ctx.out, ctx.call
        with within(call.scope):
            if ctx.region is not None and ctx.region not in FORWARD_REGIONS:
                # applied under an nx.jvp that has returned: JAX differentiates the jvp'd
                # program, whose primal output here the rule's own code computed
                _, pull = _functorch["vjp"](lambda *p: call.rule_phys(list(p), None, o), *prim)
            else:
                zeros = [torch.zeros_like(p) if isinstance(p, torch.Tensor) else p for p in prim]
                _, pull = _functorch["vjp"](lambda *t: call.rule_phys(prim, list(t), o), *zeros)
            return (None,) + tuple(pull(tuple(gs[:-1])))


class _JvpFunction(_JvpReverse):
    """custom_jvp's Function: the rule itself in forward mode, transposed in reverse."""

    @staticmethod
    def jvp(ctx, _call_tangent, *tangents):
        return ctx.call.rule_phys(list(ctx.inputs), list(tangents), ctx.out) + (None,)


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
    from ._backend import lift_constants
    from ._graph import rebuild_output, trace_flat

    gm, _, (_, _, tensor_pos), out_info = trace_flat(fun, example_args)
    gm, consts = lift_constants(gm)
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
