"""The collectives as differentiable functions on *physical* tensors.

Each collective's custom op (:mod:`._opdefs`) is wrapped here in an ``autograd.Function``
whose backward is the collective's transpose: the wrapper, not ``register_autograd``,
carries the gradient because torch.func.grad accepts only autograd.Functions with
``setup_context``.  Unless a graph is being built (:func:`_tracing`) :func:`collective`
runs the op's plain torch function instead: autograd and torch.func derive the rest.

>>> import torch
>>> from named_axes.lax._ops import collective
>>> collective("psum", torch.ones(2, 3), [0])
tensor([2., 2., 2.])
"""
from __future__ import annotations

import torch
from torch.autograd.forward_ad import unpack_dual

from .._einsum2 import einsum2_eager
from .._modes import building_graph, lowering_for_compile
from .._torch_private import functorch_transform_kinds, is_functorch_wrapped
from ._opdefs import OPS, PLAIN_CODE

__all__ = ["collective", "scale_grad", "forward_mode"]

_Fn = torch.autograd.Function


def _tracing() -> bool:
    """Whether a graph is being built that must show the collective as a named op: under
    make_fx (nx.jit, torch.export), not under ``torch.compile``, whose inductor fuses the
    plain positional code better than an opaque custom op."""
    if lowering_for_compile():
        return False
    return building_graph()


def collective(name: str, *args):
    """The collective ``named_axes::<name>`` on physical tensors (its arguments are the
    op's, :mod:`._opdefs`): its plain torch function, or while a graph is being built the
    registered op under its ``autograd.Function``."""
    if not _tracing():
        return PLAIN_CODE[name](*args)
    if name == "axis_index":   # (no tensor to differentiate)
        return OPS[name](*args)
    return _apply(name, *args)


def _apply(name: str, *args):
    """The registered op ``name`` through its ``autograd.Function``."""
    return _fn(_FUNCTION.get(name, _Linear), *args).apply(name, *args)


def _unreduce(g, dims, shape):
    for d in sorted(dims):
        g = g.unsqueeze(d)
    return g.expand(shape)


def _mean_transpose(g, shape, dims):
    n = 1
    for d in dims:
        n *= shape[d]
    return _unreduce(g, dims, shape) / n


def _gather_transpose(g, shape, dim, axis, tiled):
    if tiled:
        g = g.unflatten(axis, (shape[dim], -1))
    return g.movedim(axis, dim)


def _scatter_transpose(g, shape, dim, scatter, tiled):
    s = scatter - 1 if scatter > dim else scatter
    g = g.movedim(0, s)
    if tiled:
        g = g.flatten(s, s + 1)
    return g.unsqueeze(dim).expand(shape)


# each linear collective's transpose: (gradient, input's shape, the op's other arguments)
# -> the input's gradient.  That of an all_to_all is the all_to_all with split and concat
# swapped, that of a ppermute the ppermute with source and destination swapped.
_TRANSPOSE = {
    "psum": lambda g, shape, dims: _unreduce(g, dims, shape),
    "pmean": _mean_transpose,
    "all_gather": _gather_transpose,
    "psum_scatter": _scatter_transpose,
    "all_to_all": lambda g, _, dim, split, concat, tiled: _apply(
        "all_to_all", g, dim, concat, split, tiled),
    "ppermute": lambda g, _, dim, src, dst: _apply("ppermute", g, dim, dst, src),
}


class _Linear(_Fn):
    """A collective linear in its tensor ``x``, named by its first argument: the backward
    is its transpose (``_TRANSPOSE``), forward mode maps the tangent by the same op (see
    ``_WITH_JVP``)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(name, x, *args):
        return OPS[name](x, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.name, ctx.shape, ctx.args = inputs[0], inputs[1].shape, inputs[2:]
        ctx.aot_derivative = True   # (see _PDot.setup_context)

    @staticmethod
    def backward(ctx, g):
        grad = _TRANSPOSE[ctx.name](g, ctx.shape, *ctx.args)
        return (None, grad) + (None,) * len(ctx.args)

    @staticmethod
    def _jvp_rule(ctx, _name, t, *_):
        return _apply(ctx.name, t, *ctx.args)


class _PExtreme(_Fn):
    """``pmax`` / ``pmin``: the gradient shared evenly among the entries that attain the
    extreme, as amax's."""
    generate_vmap_rule = True

    @staticmethod
    def forward(name, x, dims):
        return OPS[name](x, dims)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, x, ctx.dims = inputs
        ctx.save_for_backward(x, output)
        ctx.aot_derivative = True   # (see _PDot.setup_context)
        ctx.save_for_forward(x, output)

    @staticmethod
    def backward(ctx, g):
        hit = _attaining(ctx, g.dtype)
        count = hit.sum(ctx.dims, keepdim=True)
        return None, _unreduce(g, ctx.dims, hit.shape) * hit / count, None

    @staticmethod
    def _jvp_rule(ctx, _name, t, _dims):   # the mean tangent of the entries attaining it
        hit = _attaining(ctx, t.dtype)
        return (t * hit).sum(ctx.dims) / hit.sum(ctx.dims)


def _attaining(ctx, dtype: torch.dtype) -> torch.Tensor:
    """1 where the saved ``x`` attains the saved extreme along ``ctx.dims``, else 0."""
    x, out = ctx.saved_tensors
    return (x == _unreduce(out, ctx.dims, x.shape)).to(dtype)


def _einsum_grad(g, go, other, to, mine, shape):
    """d(einsum(mine, to -> go))/d(mine) applied to g; letters only in ``mine`` broadcast."""
    avail = set(go) | set(to)
    keep = "".join(c for c in mine if c in avail)
    grad = einsum2_eager(f"{go},{to}->{keep}", g, other)
    view = [shape[i] if c in avail else 1 for i, c in enumerate(mine)]
    return grad.reshape(view).expand(shape)


class _PDot(_Fn):
    """``pdot``: a two-operand einsum (bilinear)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(name, x, y, equation):
        return OPS[name](x, y, equation)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, x, y, ctx.equation = inputs
        ctx.save_for_backward(x, y)
        # nx.jit inlines the collectives' plain code, whose derivative by AOT autograd is
        # this backward (not _ScaleGrad's): a program through these alone compiles so
        ctx.aot_derivative = True
        ctx.save_for_forward(x, y)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        lhs, out = ctx.equation.split("->")
        tx, ty = lhs.split(",")
        gx = _einsum_grad(g, out, y, ty, tx, x.shape) if ctx.needs_input_grad[1] else None
        gy = _einsum_grad(g, out, x, tx, ty, y.shape) if ctx.needs_input_grad[2] else None
        return None, gx, gy, None

    @staticmethod
    def _jvp_rule(ctx, _name, tx, ty, _equation):
        x, y = ctx.saved_tensors
        out = None
        if tx is not None:
            out = _apply("pdot", tx, y, ctx.equation)
        if ty is not None:
            t = _apply("pdot", x, ty, ctx.equation)
            out = t if out is None else out + t
        return out


# the Function of each collective that is not _Linear
_FUNCTION = {"pmax": _PExtreme, "pmin": _PExtreme, "pdot": _PDot}


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


# -- forward mode -------------------------------------------------------------------------
# Each Function above has a forward-mode rule (``_jvp_rule``), used through a subclass
# that defines ``jvp`` only while forward mode is active (jvp / jacfwd / hessian being
# traced): dynamo traces an autograd.Function that defines ``jvp`` differently, and wrongly.

_WITH_JVP = {cls: type(cls.__name__ + "Jvp", (cls,), {"jvp": staticmethod(cls._jvp_rule)})
             for cls in (_Linear, _PExtreme, _PDot, _ScaleGrad)}


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
