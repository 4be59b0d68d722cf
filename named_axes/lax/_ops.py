"""The collectives as differentiable functions on *physical* tensors.

Each collective is a ``torch.library`` custom op (``named_axes::psum`` …, defined with
its fake kernel and vmap rule in :mod:`._opdefs`) acting on physical dims, wrapped here
in an ``autograd.Function`` whose backward is the collective's transpose.  The wrapper,
not ``register_autograd``, carries the gradient because torch.func.grad accepts only
autograd.Functions with ``setup_context``.  So every collective is
differentiable, appears by name in traced graphs (``named_axes.psum.default``), and a
partitioning engine can replace it.

Unless a graph is being built (:func:`_tracing`) each wrapper runs the plain torch op
instead: autograd and torch.func derive its gradient and batching.

>>> import torch
>>> from named_axes.lax._ops import reduce
>>> reduce(torch.ones(2, 3), [0], "psum")
tensor([2., 2., 2.])
"""
from __future__ import annotations

import torch
from torch.autograd.forward_ad import unpack_dual

from .._einsum2 import einsum2_eager
from .._modes import building_graph, lowering_for_compile
from .._torch_private import functorch_transform_kinds, is_functorch_wrapped
from ._opdefs import (_a2a_impl, _all_gather, _all_to_all, _axis_index, _gather_impl, _pdot,
                      _permute_impl, _pmax, _pmean, _pmin, _ppermute, _psum, _psum_scatter,
                      _scatter_impl)

__all__ = ["reduce", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pdot",
           "scale_grad", "axis_index", "forward_mode"]

_Fn = torch.autograd.Function


def _tracing() -> bool:
    """Whether a graph is being built that must show the collective as a named op.

    make_fx (and the tracing inside nx.jit / torch.export / AOT autograd) pushes a
    dispatch mode.  Plain eager code, torch.func transforms and XLA tensors see none, and
    there the plain op computes the same values.  Modes that run ops on real values
    (``runs_values``: nx.jit's warm-up and identifying runs) build no graph.

    Under ``torch.compile`` (dynamo's trace, or an xmap that its graph holds as one
    call: :func:`named_axes._modes.lowering_for_compile`) the plain op is used as well:
    dynamo then traces the positional program a person would write, which inductor
    fuses better than an opaque custom op.  A mesh engine is asked before this point.
    """
    if lowering_for_compile():
        return False
    return building_graph()


# -- reductions over named dims -------------------------------------------------------

def _unreduce(g, dims, shape):
    for d in sorted(dims):
        g = g.unsqueeze(d)
    return g.expand(shape)


class _Linear(_Fn):
    """A collective linear in its tensor ``x``: ``ctx.args`` keeps the other arguments,
    and forward mode maps the tangent by the same op (see ``_WITH_JVP``)."""
    generate_vmap_rule = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape, ctx.args = inputs[0].shape, inputs[1:]


class _PSum(_Linear):
    @staticmethod
    def forward(x, dims, mean):
        return (_pmean if mean else _psum)(x, dims)

    @staticmethod
    def backward(ctx, g):
        dims, mean = ctx.args
        g = _unreduce(g, dims, ctx.shape)
        if mean:
            n = 1
            for d in dims:
                n *= ctx.shape[d]
            g = g / n
        return g, None, None


class _PExtreme(_Fn):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, dims, is_max):
        return (_pmax if is_max else _pmin)(x, dims)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dims, _ = inputs
        ctx.dims = dims
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)

    @staticmethod
    def backward(ctx, g):
        # like amax's gradient: shared evenly among the entries that attain the extreme
        x, out = ctx.saved_tensors
        hit = (x == _unreduce(out, ctx.dims, x.shape)).to(g.dtype)
        count = hit.sum(ctx.dims, keepdim=True)
        return _unreduce(g, ctx.dims, x.shape) * hit / count, None, None

    @staticmethod
    def _jvp_rule(ctx, t, _dims, _is_max):   # the mean tangent of the entries attaining it
        x, out = ctx.saved_tensors
        hit = (x == _unreduce(out, ctx.dims, x.shape)).to(t.dtype)
        return (t * hit).sum(ctx.dims) / hit.sum(ctx.dims)


# kind -> (the plain torch reduction run eagerly, the Function traced, its flag: the
# mean for _PSum, the max for _PExtreme)
_REDUCTIONS = {"psum": ("sum", _PSum, False), "pmean": ("mean", _PSum, True),
               "pmax": ("amax", _PExtreme, True), "pmin": ("amin", _PExtreme, False)}


def reduce(x: torch.Tensor, dims: list, kind: str) -> torch.Tensor:
    """``kind`` ('psum', 'pmean', 'pmax', 'pmin') over the physical dims ``dims`` (the
    named axes being reduced); pmax's and pmin's gradient shared among ties, as amax's."""
    plain, fn, flag = _REDUCTIONS[kind]
    if dims and not _tracing():
        return getattr(x, plain)(dims)
    return _fn(fn, x).apply(x, list(dims), flag)


# -- all_gather: a named dim becomes a positional one ------------------------------------

class _AllGather(_Linear):
    @staticmethod
    def forward(x, dim, axis, tiled):
        return _all_gather(x, dim, axis, tiled)

    @staticmethod
    def backward(ctx, g):
        dim, axis, tiled = ctx.args
        if tiled:
            g = g.unflatten(axis, (ctx.shape[dim], -1))
        return g.movedim(axis, dim), None, None, None


def all_gather(x: torch.Tensor, dim: int, axis: int, tiled: bool) -> torch.Tensor:
    """Move physical dim ``dim`` to ``axis`` of the result (``tiled``: merged into it)."""
    if not _tracing():  # a copy, as the op's: the result never aliases x
        return _gather_impl(x, dim, axis, tiled).clone()
    return _fn(_AllGather, x).apply(x, dim, axis, tiled)


# -- psum_scatter: sum a named dim, then split a positional dim into it -------------------

class _PSumScatter(_Linear):
    @staticmethod
    def forward(x, dim, scatter, tiled):
        return _psum_scatter(x, dim, scatter, tiled)

    @staticmethod
    def backward(ctx, g):
        dim, scatter, tiled = ctx.args
        s = scatter - 1 if scatter > dim else scatter
        g = g.movedim(0, s)
        if tiled:
            g = g.flatten(s, s + 1)
        return g.unsqueeze(dim).expand(ctx.shape), None, None, None


def psum_scatter(x: torch.Tensor, dim: int, scatter: int, tiled: bool) -> torch.Tensor:
    """Sum physical dim ``dim``; split physical dim ``scatter`` into a new leading dim."""
    if not _tracing():
        return _scatter_impl(x, dim, scatter, tiled).contiguous()
    return _fn(_PSumScatter, x).apply(x, dim, scatter, tiled)


# -- all_to_all: swap a named dim with (blocks of) a positional dim ------------------------

class _AllToAll(_Linear):
    @staticmethod
    def forward(x, dim, split, concat, tiled):
        return _all_to_all(x, dim, split, concat, tiled)

    @staticmethod
    def backward(ctx, g):
        # the transpose of an all_to_all is the all_to_all with split and concat swapped
        dim, split, concat, tiled = ctx.args
        return _fn(_AllToAll, g).apply(g, dim, concat, split, tiled), None, None, None, None


def all_to_all(x: torch.Tensor, dim: int, split: int, concat: int, tiled: bool) -> torch.Tensor:
    """Named dim ``dim`` takes the (blocks of) positional dim ``split``; the old named
    index becomes positional dim ``concat`` (``tiled``: concatenated into it)."""
    if not _tracing():
        return _a2a_impl(x, dim, split, concat, tiled).clone()
    return _fn(_AllToAll, x).apply(x, dim, split, concat, tiled)


# -- ppermute: move slices of a named dim --------------------------------------------------

class _PPermute(_Linear):
    @staticmethod
    def forward(x, dim, src, dst):
        return _ppermute(x, dim, src, dst)

    @staticmethod
    def backward(ctx, g):
        dim, src, dst = ctx.args
        return _fn(_PPermute, g).apply(g, dim, dst, src), None, None, None


def ppermute(x: torch.Tensor, dim: int, src: list, dst: list) -> torch.Tensor:
    """``out[dst[j]] = x[src[j]]`` along physical dim ``dim``; other slices are zero."""
    if not _tracing():
        return _permute_impl(x, dim, src, dst)
    return _fn(_PPermute, x).apply(x, dim, list(src), list(dst))


# -- pdot: a two-operand einsum that contracts named dims ---------------------------------

def _einsum_grad(g, go, other, to, mine, shape):
    """d(einsum(mine, to -> go))/d(mine) applied to g; letters only in ``mine`` broadcast."""
    avail = set(go) | set(to)
    keep = "".join(c for c in mine if c in avail)
    grad = einsum2_eager(f"{go},{to}->{keep}", g, other)
    view = [shape[i] if c in avail else 1 for i, c in enumerate(mine)]
    return grad.reshape(view).expand(shape)


class _PDot(_Fn):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y, equation):
        return _pdot(x, y, equation)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, ctx.equation = inputs
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(x, y)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        lhs, out = ctx.equation.split("->")
        tx, ty = lhs.split(",")
        gx = _einsum_grad(g, out, y, ty, tx, x.shape) if ctx.needs_input_grad[0] else None
        gy = _einsum_grad(g, out, x, tx, ty, y.shape) if ctx.needs_input_grad[1] else None
        return gx, gy, None

    @staticmethod
    def _jvp_rule(ctx, tx, ty, _equation):   # bilinear
        x, y = ctx.saved_tensors
        out = None
        if tx is not None:
            out = _fn(_PDot, tx, y).apply(tx, y, ctx.equation)
        if ty is not None:
            t = _fn(_PDot, x, ty).apply(x, ty, ctx.equation)
            out = t if out is None else out + t
        return out


def pdot(x: torch.Tensor, y: torch.Tensor, equation: str) -> torch.Tensor:
    """``torch.einsum(equation, x, y)`` as the named op ``named_axes::pdot``."""
    if not _tracing():  # one mm / bmm where it can (see named_axes._einsum2)
        return einsum2_eager(equation, x, y)
    return _fn(_PDot, x, y).apply(x, y, equation)


class _ScaleGrad(_Fn):
    """The identity, whose gradient is multiplied by ``scale``."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None

    @staticmethod
    def _jvp_rule(ctx, t, _scale):   # the identity forward
        return t


def scale_grad(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x``, with its gradient multiplied by ``scale`` (a no-op without autograd)."""
    if not x.requires_grad and not is_functorch_wrapped(x):
        return x
    return _fn(_ScaleGrad, x).apply(x, scale)


# -- axis_index -----------------------------------------------------------------------------

def axis_index(n: int, device=None) -> torch.Tensor:
    """``arange(n)`` as the named op ``named_axes::axis_index``."""
    device = torch.device("cpu") if device is None else torch.device(device)
    if not _tracing():
        return torch.arange(n, device=device)
    return _axis_index(n, device)


# -- forward mode -------------------------------------------------------------------------
# Each function above has a forward-mode rule (``_jvp_rule``, or for a ``_Linear`` one the
# op on the tangent), used through a subclass that defines ``jvp`` only while forward mode
# is active (jvp / jacfwd / hessian being traced): dynamo traces an autograd.Function
# that defines ``jvp`` differently, and wrongly.

def _jvp_rule(cls):
    if not issubclass(cls, _Linear):
        return cls._jvp_rule

    def jvp(ctx, t, *_):
        return _fn(cls, t).apply(t, *ctx.args)
    return jvp


_WITH_JVP = {cls: type(cls.__name__ + "Jvp", (cls,), {"jvp": staticmethod(_jvp_rule(cls))})
             for cls in (_PSum, _PExtreme, _AllGather, _PSumScatter, _AllToAll, _PPermute,
                         _PDot, _ScaleGrad)}


def _fn(cls, *operands):
    """``cls``, or its subclass with a ``jvp`` while forward-mode AD is running."""
    return _WITH_JVP[cls] if forward_mode(*operands) else cls


def forward_mode(*values) -> bool:
    """Whether forward-mode AD runs on ``values``: one of them is a dual tensor
    (``torch.autograd.forward_ad``), or a functorch jvp level is open."""
    if torch.compiler.is_dynamo_compiling():
        return False
    if any(isinstance(v, torch.Tensor) and unpack_dual(v).tangent is not None
           for v in values):
        return True
    return "Jvp" in functorch_transform_kinds()
