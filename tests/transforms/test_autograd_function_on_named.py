"""A user's ``torch.autograd.Function`` applied to named values that need a gradient is
refused with an AxisTypeError naming the Function: ``Function.apply`` takes a NamedTensor
for a non-tensor argument, so autograd recorded nothing through it (was: a gradient of
None -- torch's "does not require grad" -- outside, and silently zero under nx.grad).
Forward-only uses, a Function whose forward runs an xmap on its plain inputs, and
functorch-ready Functions under torch.func's transforms keep working."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


class SquareCtx(torch.autograd.Function):   # setup_context style, with a vmap rule
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


X = torch.arange(6.).reshape(2, 3)
KW = dict(in_axes=["i", ...], out_axes=["i", ...])


@pytest.mark.parametrize("fn", [Square, SquareCtx])
def test_gradient_through_xmap_is_refused_not_lost(fn):
    x = X.clone().requires_grad_()
    with pytest.raises(nx.AxisTypeError, match=rf"{fn.__name__}\.apply on named values.*"
                                                r"nx\.custom_vjp"):
        nx.xmap(lambda v: fn.apply(v), **KW)(x)


@pytest.mark.parametrize("fn", [Square, SquareCtx])
def test_nx_grad_inside_xmap_is_refused_not_zero(fn):
    f = nx.xmap(lambda v: nx.grad(lambda u: fn.apply(u).sum())(v), **KW)
    with pytest.raises(nx.AxisTypeError, match=f"{fn.__name__}.apply"):
        f(X)


@pytest.mark.parametrize("fn", [Square, SquareCtx])
def test_forward_only_use_equals_the_loop(fn):
    out = nx.xmap(lambda v: fn.apply(v), **KW)(X)
    torch.testing.assert_close(out, torch.stack([fn.apply(r) for r in X]))


def test_function_whose_forward_runs_an_xmap_keeps_its_gradient():
    class Wrapped(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return nx.xmap(lambda v: v * v, **KW)(x)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g
    x = X.clone().requires_grad_()
    g, = torch.autograd.grad(Wrapped.apply(x).sum(), x)
    torch.testing.assert_close(g, 2 * X)


def test_functorch_ready_function_under_torch_func_grad_of_xmap():
    f = nx.xmap(lambda v: SquareCtx.apply(v), **KW)
    torch.testing.assert_close(torch.func.grad(lambda u: f(u).sum())(X), 2 * X)


def test_plain_parameter_given_with_named_values_is_refused_not_lost():
    class Mul(torch.autograd.Function):   # forward saves nothing: no torch error either
        @staticmethod
        def forward(ctx, x, w):
            return x * w

        @staticmethod
        def backward(ctx, g):
            return g, g
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(nx.AxisTypeError, match=r"Mul\.apply on named values"):
        nx.xmap(lambda v: Mul.apply(v, w) * w, **KW)(X)
