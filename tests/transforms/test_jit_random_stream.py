"""A jitted program's random ops draw torch's random stream as eager code does: after
``torch.manual_seed`` the compiled program gives eager's numbers, and compiling it draws
nothing from the stream (reseeding repeats the first call's numbers)."""
from __future__ import annotations

import torch

import named_axes as nx


def _noisy(x):
    return x + torch.randn(3)


def test_seeded_random_stream_matches_eager():
    f = nx.jit(_noisy)
    x = torch.zeros(3)
    torch.manual_seed(0)
    got = [f(x), f(x)]
    torch.manual_seed(0)
    want = [_noisy(x), _noisy(x)]
    torch.testing.assert_close(got, want)
    torch.manual_seed(0)
    torch.testing.assert_close(f(x), want[0])


def test_named_program_stream_matches_eager():
    g = nx.xmap(lambda x: x * torch.rand_like(x), in_axes=['b', ...], out_axes=['b', ...])
    f = nx.jit(g)
    x = torch.ones(2, 8)
    torch.manual_seed(1)
    got = f(x)
    torch.manual_seed(1)
    torch.testing.assert_close(got, g(x))
