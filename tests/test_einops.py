"""einops.rearrange/reduce/repeat on NamedTensors act on positional axes only."""
from __future__ import annotations

import einops
import torch

import named_axes as nx


def _x():
    return torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(0))


def test_rearrange_keeps_named_axes():
    x = nx.named(_x(), {0: 'batch'})
    y = einops.rearrange(x, 'h (w c) -> (c h) w', c=2)
    assert y.named_shape == {'batch': 3} and y.shape == (8, 3)
    ref = torch.stack([einops.rearrange(_x()[b], 'h (w c) -> (c h) w', c=2) for b in range(3)])
    torch.testing.assert_close(nx.positional(y, 'batch ...'), ref)


def test_reduce_and_repeat_per_index():
    x = nx.named(_x(), {1: 'h'})              # positional (3, 6)
    r = einops.reduce(x, 'a b -> b', 'max')
    p = einops.repeat(x, 'a b -> a k b', k=2)
    assert r.named_shape == {'h': 4} and p.shape == (3, 2, 6)
    for h in range(4):
        plain = _x()[:, h]
        torch.testing.assert_close(nx.positional(r, 'h ...')[h], plain.amax(0))
        torch.testing.assert_close(nx.positional(p, 'h ...')[h],
                                   plain[:, None].expand(3, 2, 6))


def test_inside_xmap():
    f = nx.xmap(lambda t: einops.reduce(t, 'h w -> h', 'mean'),
                in_axes=['batch', ...], out_axes=['batch', ...])
    torch.testing.assert_close(f(_x()), _x().mean(-1))
