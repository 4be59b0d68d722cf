"""nx.jit of a program applying an nx.custom_vjp / nx.custom_jvp rule, differentiated
after the call (``loss.backward()`` on the compiled program's output): the gradient is
the rule's, as eagerly.  AOT autograd differentiated the traced forward anew, and the
rule -- which lives in its autograd.Function, not in the aten ops -- was dropped without
a word (the function's own derivative came back).  Reference: the eager gradients."""
import pytest
import torch

import named_axes as nx

X = torch.tensor([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]])


@nx.custom_vjp
def _vjp_rule(a):
    return torch.sin(a)


_vjp_rule.defvjp(lambda a: (_vjp_rule(a), a), lambda a, g: (g * 100.,))


@nx.custom_jvp
def _jvp_rule(a):
    return torch.sin(a)


_jvp_rule.defjvps(lambda t, ans, a: t * 100.)


def _grad_after(f):
    x = torch.nn.Parameter(X.clone())
    return torch.autograd.grad((f(x) * torch.arange(6.).reshape(3, 2)).sum(), x)[0]


@pytest.mark.parametrize("rule", [_vjp_rule, _jvp_rule])
@pytest.mark.parametrize("in_xmap", [False, True])
def test_jit_keeps_the_rule(rule, in_xmap):
    f = lambda x: rule(x * 2) * 3   # noqa: E731
    if in_xmap:
        f = nx.xmap(f, in_axes=['i', ...], out_axes=['i', ...])
    want = _grad_after(f)
    torch.testing.assert_close(want, torch.arange(6.).reshape(3, 2) * 3 * 100 * 2)
    torch.testing.assert_close(_grad_after(nx.jit(f)), want)
