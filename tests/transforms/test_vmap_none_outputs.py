"""nx.vmap's named path returns a None output as None, as jax.vmap does (JAX 0.4.30:
vmap(lambda a: (a, None))(x) -> (x, None); vmap(lambda a: None)(x) -> None)."""
from __future__ import annotations

import torch

import named_axes as nx

X = torch.arange(6.).reshape(2, 3)


def test_none_outputs_with_an_axis_name():
    assert nx.vmap(lambda a: None, axis_name="i")(X) is None
    a, n = nx.vmap(lambda a: (a * 2, None), axis_name="i")(X)
    assert torch.equal(a, X * 2) and n is None
    a, n = nx.vmap(lambda a: (a, None), out_dims=(1, 0), axis_name="i")(X)
    assert torch.equal(a, X.T) and n is None


def test_none_outputs_inside_xmap_and_in_chunks():
    f = nx.xmap(lambda r: nx.vmap(lambda c: (c + 1, None))(r)[0], in_axes=["b", ...],
                out_axes=["b", ...])
    assert torch.equal(f(X), X + 1)
    g = nx.xmap(lambda r: nx.vmap(lambda c: (c + 1, None), chunk_size=2)(r), in_axes=["b", ...],
                out_axes=["b", ...])
    a, n = g(X)
    assert torch.equal(a, X + 1) and n is None
