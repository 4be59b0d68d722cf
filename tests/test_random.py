"""Random ops on named values draw independently per named index (torch.func's
``randomness='different'``) and are reproducible under ``torch.manual_seed``."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

N = 2000


def _x():
    return nx.named(torch.ones(3, 2, N), {0: "i", 1: "j"})


RANDOM = {
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "randint_like": lambda x: torch.randint_like(x, 1000).float(),
    "bernoulli": lambda x: torch.bernoulli(x * 0.5),
    "dropout": lambda x: F.dropout(x, 0.5),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, training=True),
    "Tensor.uniform_": lambda x: x.clone().uniform_(),
    "Tensor.normal_": lambda x: x.clone().normal_(),
    "Tensor.bernoulli_": lambda x: x.clone().bernoulli_(0.5),
    "nn.Dropout": lambda x: torch.nn.Dropout(0.3)(x),
    "rrelu-train": lambda x: F.rrelu(-x, training=True),
}


@pytest.mark.parametrize("name", list(RANDOM))
def test_independent_per_named_index_and_reproducible(name):
    fn = RANDOM[name]
    torch.manual_seed(123)
    out = fn(_x())
    assert out.named_shape == {"i": 3, "j": 2} and out.shape == (N,)
    full = nx.positional(out, {0: "i", 1: "j"}).reshape(6, N)
    for a in range(6):
        for b in range(a + 1, 6):
            assert not torch.equal(full[a], full[b]), f"{name}: indices {a} and {b} drew the same values"
    torch.manual_seed(123)
    again = nx.positional(fn(_x()), {0: "i", 1: "j"}).reshape(6, N)
    assert torch.equal(full, again)


def test_dropout_values_are_zero_or_scaled_and_keep_rate():
    torch.manual_seed(0)
    x = nx.named(torch.rand(4, N) + 1.0, {0: "b"})
    out = F.dropout(x, 0.25)
    xs, os = nx.positional(x, {0: "b"}), nx.positional(out, {0: "b"})
    kept = os != 0
    torch.testing.assert_close(os[kept], xs[kept] / 0.75)
    rate = kept.float().mean(1)
    assert torch.all((rate > 0.7) & (rate < 0.8)), rate


def test_rand_like_distribution_per_index():
    torch.manual_seed(1)
    r = nx.positional(torch.rand_like(nx.named(torch.zeros(3, N), {0: "b"})), {0: "b"})
    assert torch.all((r >= 0) & (r < 1))
    assert torch.all((r.mean(1) - 0.5).abs() < 0.05)


def test_random_inside_xmap_is_per_index_and_seeded():
    f = nx.xmap(lambda v: F.dropout(v, 0.5), in_axes={0: "b"}, out_axes={0: "b"})
    torch.manual_seed(5)
    out = f(torch.ones(4, N))
    assert not torch.equal(out[0], out[1])
    torch.manual_seed(5)
    assert torch.equal(out, f(torch.ones(4, N)))


def test_dropout_p0_and_eval_are_identity():
    x = nx.named(torch.rand(3, 5), {0: "b"})
    assert torch.equal(nx.positional(F.dropout(x, 0.0), {0: "b"}), nx.positional(x, {0: "b"}))
    assert torch.equal(nx.positional(F.dropout(x, 0.9, training=False), {0: "b"}),
                       nx.positional(x, {0: "b"}))
