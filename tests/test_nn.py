"""``nx.nn``: jax.nn's functions on plain and named values.

References are jax.nn 0.4.30's definitions written out in torch (the formulas of its
source), applied to the positional values; a named input gives the same values with
its named shape kept, inside ``xmap`` as outside.
"""
from __future__ import annotations

import math

import pytest
import torch

import named_axes as nx

# name -> (nx.nn call, jax.nn's definition)
ACTIVATIONS = {
    "relu": (nx.nn.relu, lambda x: torch.maximum(x, torch.zeros(()))),
    "relu6": (nx.nn.relu6, lambda x: torch.clamp(x, 0, 6)),
    "gelu": (nx.nn.gelu, lambda x: 0.5 * x * (1 + torch.tanh(
        math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "gelu_exact": (lambda x: nx.nn.gelu(x, approximate=False),
                   lambda x: x * (1 + torch.erf(x / math.sqrt(2))) / 2),
    "silu": (nx.nn.silu, lambda x: x / (1 + torch.exp(-x))),
    "swish": (nx.nn.swish, lambda x: x / (1 + torch.exp(-x))),
    "sigmoid": (nx.nn.sigmoid, lambda x: 1 / (1 + torch.exp(-x))),
    "softplus": (nx.nn.softplus, lambda x: torch.logaddexp(x, torch.zeros(()))),
    "log_sigmoid": (nx.nn.log_sigmoid, lambda x: -torch.logaddexp(-x, torch.zeros(()))),
    "elu": (lambda x: nx.nn.elu(x, 0.5),
            lambda x: torch.where(x > 0, x, 0.5 * torch.expm1(x))),
    "leaky_relu": (lambda x: nx.nn.leaky_relu(x, 0.2),
                   lambda x: torch.where(x >= 0, x, 0.2 * x)),
    "tanh": (nx.nn.tanh, lambda x: (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)),
}


@pytest.fixture
def values():
    torch.manual_seed(0)
    return torch.randn(4, 3, dtype=torch.float64) * 3


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_jax_definition(name, values):
    ours, ref = ACTIVATIONS[name]
    torch.testing.assert_close(ours(values), ref(values))
    named = ours(nx.named(values, "N C"))
    assert named.named_shape == {"N": 4, "C": 3} and named.shape == ()
    torch.testing.assert_close(nx.positional(named, ["N", "C"]), ref(values))
    inside = nx.xmap(ours, in_axes=["N", ...], out_axes=["N", ...])(values)
    torch.testing.assert_close(inside, ref(values))


def test_softmax_family_over_names_ints_and_mixes(values):
    x = nx.named(values, {0: "N"})            # positional dim 0 holds C
    ref_c = torch.softmax(values, 1)
    torch.testing.assert_close(nx.positional(nx.nn.softmax(x, 0), {0: "N"}), ref_c)
    torch.testing.assert_close(nx.positional(nx.nn.softmax(x, "N"), {0: "N"}),
                               torch.softmax(values, 0))
    both = nx.nn.softmax(x, ("N", 0))
    torch.testing.assert_close(nx.positional(both, {0: "N"}),
                               torch.softmax(values.flatten(), 0).view(4, 3))
    torch.testing.assert_close(nx.positional(nx.nn.log_softmax(x, ("N", 0)), {0: "N"}),
                               torch.log_softmax(values.flatten(), 0).view(4, 3))
    lse = nx.nn.logsumexp(x, "N")
    assert type(lse) is torch.Tensor   # no named axis left: a plain tensor
    torch.testing.assert_close(lse, torch.logsumexp(values, 0))
    kept = nx.nn.logsumexp(x, 0, keepdims=True)
    assert kept.named_shape == {"N": 4} and kept.shape == (1,)
    torch.testing.assert_close(nx.positional(kept, {0: "N"}),
                               torch.logsumexp(values, 1, keepdim=True))


def test_standardize_is_jax_formula(values):
    x = nx.named(values, {0: "N"})
    mean = values.mean(0, keepdim=True)
    var = (values * values).mean(0, keepdim=True) - mean * mean
    ref = (values - mean) / torch.sqrt(var + 1e-5)
    torch.testing.assert_close(nx.positional(nx.nn.standardize(x, "N"), {0: "N"}), ref)
    torch.testing.assert_close(nx.positional(nx.nn.normalize(x, "N"), {0: "N"}), ref)
    given = nx.nn.standardize(values, 0, mean=torch.zeros(1, 3), variance=torch.ones(1, 3),
                              epsilon=0.0)
    torch.testing.assert_close(given, values)
