"""nx.jit compiles a program that takes derivatives inside (a training step) to values.

Eager results of such a program are differentiable; the compiled ones are not, so where
eager ones would be (grad mode on, an input requiring grad) a backward through them must
raise, never silently leave their part out of a loss they enter (it did: the results
came back detached, and ``out.sum() + (x * x).sum()`` differentiated as if ``out`` were
a constant).
"""
import pytest
import torch

import named_axes as nx


def _inner_grad(x):
    return torch.func.grad(lambda v: (v.sin() * v).sum())(x) * x


def test_differentiating_the_results_again_raises():
    x = torch.randn(5, requires_grad=True)
    jitted = nx.jit(_inner_grad)
    for _ in range(2):   # the first call compiles, the second takes the fast lane
        out = jitted(x)
        torch.testing.assert_close(out, _inner_grad(x))
        with pytest.raises(nx.AxisTypeError, match=r"jit\(_inner_grad\).*values"):
            torch.autograd.grad(out.sum() + (x * x).sum(), x)


def test_a_training_step_returns_values_that_an_update_uses():
    w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    step = nx.jit(nx.value_and_grad(lambda w: (w.sin() ** 2).sum()))
    eager_value, eager_grad = nx.value_and_grad(lambda w: (w.sin() ** 2).sum())(w)
    for _ in range(2):
        value, grad = step(w)
        torch.testing.assert_close(value, eager_value)
        torch.testing.assert_close(grad, eager_grad)
    with torch.no_grad():
        w -= 0.1 * grad
        value, grad = step(w)
    assert not value.requires_grad and not grad.requires_grad


def test_results_without_a_differentiable_input_stay_plain():
    jitted = nx.jit(_inner_grad)
    x = torch.randn(5)
    assert not jitted(x).requires_grad
    assert not jitted(x).requires_grad


def test_a_step_fed_its_own_results_makes_no_chain_of_nodes():
    # a functional training loop (w = step(w)) must not link every step's results to
    # the previous step's: the refusing node ties results to the inputs only once
    step = nx.jit(lambda w: w - 0.1 * nx.grad(lambda w: (w.sin() ** 2).sum())(w))
    w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    w1 = step(w)
    assert w1.requires_grad
    w2 = step(w1)
    w3 = step(w2)
    assert w3.grad_fn is None
    ref = w.detach()
    for _ in range(3):
        ref = ref - 0.1 * torch.func.grad(lambda w: (w.sin() ** 2).sum())(ref)
    torch.testing.assert_close(w3, ref)
