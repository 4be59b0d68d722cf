"""Eager nx.grad / value_and_grad through torch.autograd (no torch.func level): the
results and their autograd connectivity must be what torch.func.grad gives."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def loss(w, x):
    return ((x @ w).tanh() - 0.5).square().sum()


@pytest.fixture
def wx():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 2, generator=g), torch.randn(5, 3, generator=g)


def test_results_are_detached_like_torch_func(wx):
    w, x = wx
    v, g = nx.value_and_grad(loss)(w, x)
    rg, rv = torch.func.grad_and_value(loss)(w, x)
    torch.testing.assert_close((v, g), (rv, rg))
    assert not v.requires_grad and not g.requires_grad
    assert w.grad is None and not w.requires_grad


def test_unused_input_gets_zeros(wx):
    w, x = wx
    g = nx.grad(lambda w, x: (x ** 2).sum(), argnums=(0, 1))(w, x)
    torch.testing.assert_close(g[0], torch.zeros_like(w))
    torch.testing.assert_close(g[1], 2 * x)
    g = nx.grad(lambda w: torch.tensor(1.0))(w)
    torch.testing.assert_close(g, torch.zeros_like(w))


def test_same_tensor_twice_gives_partials(wx):
    w, _ = wx
    f = lambda a, b: (a * b.sin()).sum()
    got = nx.grad(f, argnums=(0, 1))(w, w)
    ref = torch.func.grad(f, argnums=(0, 1))(w, w)
    torch.testing.assert_close(got, ref)


def test_closure_parameter_stays_connected(wx):
    """Second order through outer autograd: d/dp of grad_w(loss) with p closed over."""
    w, x = wx
    p = torch.tensor(1.5, requires_grad=True)
    f = lambda w: ((x @ w) * p).tanh().sum()
    g = nx.grad(f)(w)
    assert g.requires_grad
    (dp,) = torch.autograd.grad(g.sum(), p)
    p2 = p.detach().clone().requires_grad_()
    ref = torch.func.grad(lambda w: ((x @ w) * p2).tanh().sum())(w)
    (ref_dp,) = torch.autograd.grad(ref.sum(), p2)
    torch.testing.assert_close(g, ref)
    torch.testing.assert_close(dp, ref_dp)


def test_input_requiring_grad_stays_connected(wx):
    w, x = wx
    w = w.clone().requires_grad_()
    g = nx.grad(loss)(w, x)
    (hvp,) = torch.autograd.grad(g.sum(), w)
    w2 = w.detach().clone().requires_grad_()
    (ref,) = torch.autograd.grad(torch.func.grad(loss)(w2, x).sum(), w2)
    torch.testing.assert_close(hvp, ref)
    assert w.grad is None


def test_under_no_grad_and_with_aux(wx):
    w, x = wx
    p = torch.tensor(2.0, requires_grad=True)

    def f(w):
        out = (x @ w * p).sum()
        return out, {"o": out * 2, "tag": 1}

    with torch.no_grad():
        (v, aux), g = nx.value_and_grad(f, has_aux=True)(w)
    assert not g.requires_grad and not v.requires_grad and not aux["o"].requires_grad
    torch.testing.assert_close(g, torch.func.grad(lambda w: f(w)[0])(w))
    assert aux["tag"] == 1


def test_named_per_example_and_reduce(wx):
    w, x = wx
    per = nx.xmap(nx.grad(loss), in_axes=({}, ["b", ...]), out_axes=["b", ...])(w, x)
    ref = torch.stack([torch.func.grad(loss)(w, x[i]) for i in range(5)])
    torch.testing.assert_close(per, ref)
    red = nx.xmap(nx.grad(loss, reduce_axes=("b",)), in_axes=({}, ["b", ...]),
                  out_axes=[...])(w, x)
    torch.testing.assert_close(red, ref.sum(0))
