"""Axes a differentiated function makes itself (``nx.named`` inside ``f``) are its own,
like an inner xmap's: the differentiated inputs are not broadcast along them.  And
per-example gradients of an ``nn.Module`` through ``nx.nn.functional_call``.
Reference: ``torch.func.vmap(torch.func.grad(...))`` on the positional program."""
from __future__ import annotations

import pytest
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


class _Tied(torch.nn.Module):
    """An embedding whose output projection is the same parameter (weight tying)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(6, 3)
        self.out = torch.nn.Linear(3, 6, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, i):
        return self.out(self.embed(i) * self.scale).logsumexp(-1)


def test_functional_call_follows_torch_for_tied_weights_strict_and_dict_tuples():
    """nx.nn.functional_call takes torch.func.functional_call's arguments and gives its
    results: a value for one of tied parameters replaces both (tie_weights=True) or
    one (False); a tuple of dicts; strict=True asks for every parameter and buffer."""
    m, i = _Tied(), torch.tensor([1, 4, 2])
    w = torch.randn(6, 3)
    for kw in ({}, {"tie_weights": False}):
        want = torch.func.functional_call(m, {"embed.weight": w}, (i,), **kw)
        torch.testing.assert_close(nx.nn.functional_call(m, {"embed.weight": w}, (i,), **kw),
                                   want)
    two = ({"embed.weight": w}, {"scale": torch.tensor(3.0)})
    torch.testing.assert_close(nx.nn.functional_call(m, two, i),
                               torch.func.functional_call(m, two, i))
    with pytest.raises(nx.AxisTypeError, match=r"missing 'scale' \(strict=True\)"):
        nx.nn.functional_call(m, {"embed.weight": w}, (i,), strict=True)
    with pytest.raises(nx.AxisTypeError, match=r"no parameter or buffer 'embed.bias'"):
        nx.nn.functional_call(m, {"embed.bias": w}, (i,))
    assert m.out.weight is m.embed.weight and type(m.embed.weight) is torch.nn.Parameter


def test_torch_func_functional_call_takes_named_values_after_the_opt_in():
    """Without the opt-in, torch's functional_call refuses a NamedTensor (its own
    TypeError); after nx.enable_torch_func() it runs nx.nn.functional_call, and plain
    values still go to torch's."""
    m = torch.nn.Linear(3, 1)
    p = {k: v.detach() for k, v in m.named_parameters()}
    x = torch.randn(5, 3)
    loss = lambda p, x: torch.func.functional_call(m, p, (x,)).sum()   # noqa: E731
    g = nx.xmap(nx.grad(loss), in_axes=[{}, ['batch', ...]], out_axes=['batch', ...])
    with pytest.raises(TypeError):
        g(p, x)
    nx.enable_torch_func()
    try:
        out = g(p, x)
        assert torch.func.functional_call(m, p, (x,)).shape == (5, 1)
    finally:
        nx.disable_torch_func()
    ref = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(p, x)
    for k in p:
        torch.testing.assert_close(out[k], ref[k])
