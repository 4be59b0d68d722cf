"""Axes a differentiated function makes itself (``nx.named`` inside ``f``) are its own,
like an inner xmap's: the differentiated inputs are not broadcast along them.  And
per-example gradients of an ``nn.Module`` through ``nx.nn.functional_call``.
Reference: ``torch.func.vmap(torch.func.grad(...))`` on the positional program."""
from __future__ import annotations

import torch

import named_axes as nx


def _loss(w, x):
    logits = nx.named(x @ w, 'classes')
    return nx.logsumexp(logits, 'classes')


def _ref_loss(w, x):
    return torch.logsumexp(x @ w, -1)


def test_grad_of_a_function_that_names_an_axis():
    w, x = torch.randn(3, 4), torch.randn(3)
    torch.testing.assert_close(nx.grad(_loss)(w, x), torch.func.grad(_ref_loss)(w, x))


def test_per_example_grad_inside_xmap_of_a_function_that_names_an_axis():
    w, xs = torch.randn(3, 4), torch.randn(5, 3)
    f = nx.xmap(lambda w, x: nx.grad(_loss)(w, x), in_axes=[[...], ['batch', ...]],
                out_axes=['batch', ...])
    ref = torch.func.vmap(torch.func.grad(_ref_loss), in_dims=(None, 0))(w, xs)
    torch.testing.assert_close(f(w, xs), ref)
    v, g = nx.xmap(lambda w, x: nx.value_and_grad(_loss)(w, x), in_axes=[[...], ['batch', ...]],
                   out_axes=['batch', ...])(w, xs)
    torch.testing.assert_close(g, ref)
    torch.testing.assert_close(v, torch.logsumexp(xs @ w, -1))


def test_per_example_module_gradients_through_functional_call():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    p = {k: v.detach() for k, v in m.named_parameters()}
    x = torch.randn(5, 3)
    loss = lambda p, x: nx.nn.functional_call(m, p, (x,)).sum()   # noqa: E731
    out = nx.xmap(nx.grad(loss), in_axes=[{}, ['batch', ...]], out_axes=['batch', ...])(p, x)
    ref = torch.func.vmap(torch.func.grad(
        lambda p, x: torch.func.functional_call(m, p, (x,)).sum()), in_dims=(None, 0))(p, x)
    for k in p:
        torch.testing.assert_close(out[k], ref[k])
    assert all(type(v) is torch.nn.Parameter for v in m.parameters()), "restored"
