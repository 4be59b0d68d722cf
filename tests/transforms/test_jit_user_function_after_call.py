"""nx.jit of a program applying a user's ``torch.autograd.Function`` (a straight-through
estimator), differentiated after the call: the gradient is the Function's backward's,
as eagerly and under torch.compile.  AOT autograd differentiated the traced forward
anew and dropped it without a word (round's zero derivative came back)."""
import torch

import named_axes as nx


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g * 7


def _grad_after(f):
    x = torch.nn.Parameter(torch.tensor([0.4, 1.6, -2.2]))
    return torch.autograd.grad((f(x) * torch.tensor([1., 2., 3.])).sum(), x)[0]


def test_jit_keeps_a_user_functions_backward():
    f = lambda x: _StraightThrough.apply(x * 2) * 3   # noqa: E731
    want = _grad_after(f)
    torch.testing.assert_close(want, torch.tensor([42., 84., 126.]))
    torch.testing.assert_close(_grad_after(nx.jit(f)), want)
