"""torch.nn modules on NamedTensors equal the module run once per named index."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import named_axes as nx

torch.manual_seed(0)

MODULES = {  # name -> (module factory, positional input shape, dtype kind)
    "Linear": (lambda: nn.Linear(6, 4), (5, 6), "float"),
    "LayerNorm": (lambda: nn.LayerNorm(6), (5, 6), "float"),
    "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), (2, 3, 7), "float"),
    "Conv2d": (lambda: nn.Conv2d(3, 4, 3), (2, 3, 6, 6), "float"),
    "Embedding": (lambda: nn.Embedding(10, 4), (5,), "long"),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8), "float"),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                   batch_first=True), (2, 5, 8), "float"),
}


def _input(shape, kind, lead=(3, 2)):
    g = torch.Generator().manual_seed(1)
    if kind == "long":
        return torch.randint(0, 10, lead + shape, generator=g)
    return torch.randn(lead + shape, generator=g, dtype=torch.float64)


def _call(mod, x):
    out = mod(x, x, x, need_weights=False) if isinstance(mod, nn.MultiheadAttention) else mod(x)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("train", [False, True])
def test_module_per_index(name, train):
    make, shape, kind = MODULES[name]
    mod = make().double().train(train)
    full = _input(shape, kind)
    out = _call(mod, nx.named(full, ['a', 'b', ...]))
    assert out.named_shape == {'a': 3, 'b': 2}
    ref = torch.stack([torch.stack([_call(mod, full[i, j]) for j in range(2)]) for i in range(3)])
    torch.testing.assert_close(nx.positional(out, ['a', 'b', ...]), ref)


def test_module_gradients_match_loop():
    mod = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5)).double()
    full = _input((4, 6), "float")
    nx.positional(mod(nx.named(full, ['a', 'b', ...]))).pow(2).sum().backward()
    got = [p.grad.clone() for p in mod.parameters()]
    mod.zero_grad()
    sum(mod(full[i, j]).pow(2).sum() for i in range(3) for j in range(2)).backward()
    for g, p in zip(got, mod.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_module_inside_xmap():
    mod = nn.Linear(6, 4).double()
    full = _input((6,), "float")
    f = nx.xmap(lambda x: mod(x), in_axes=['a', 'b', ...], out_axes=['a', 'b', ...])
    torch.testing.assert_close(f(full), mod(full))
