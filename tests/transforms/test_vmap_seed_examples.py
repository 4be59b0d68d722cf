"""The jax.vmap page's examples (shared/seeds/jax-vmap-api.txt), on nx.vmap, with and
without an axis name (the plain path is torch.func.vmap's, the named one ours). Before,
the plain path refused the example whose function returns a Python number with
out_axes=0 (torch's "must only return Tensors"); JAX broadcasts it."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

KW = [{}, {"axis_name": "k"}]


@pytest.mark.parametrize("kw", KW)
def test_matrix_products_from_vdot(kw):
    vv = lambda x, y: torch.vdot(x, y)   # noqa: E731
    mv = nx.vmap(vv, (0, None), 0, **kw)
    mm = nx.vmap(mv, (None, 1), 1)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    torch.testing.assert_close(mm(a, b), a @ b)
    mv2 = nx.vmap(vv, (0, 1), 0, **kw)
    mm2 = nx.vmap(mv2, (1, 1), 0)
    assert mm2(torch.ones(2, 4, 3), torch.ones(3, 4, 2)).shape == (4, 2)


@pytest.mark.parametrize("kw", KW)
def test_container_in_axes(kw):
    def foo(tree_arg):
        x, (y, z) = tree_arg
        return x @ (y @ z)
    tree = (torch.ones(6, 2, 3), (torch.ones(3, 6, 4), torch.ones(4, 5, 6)))
    assert nx.vmap(foo, in_dims=((0, (1, 2)),), **kw)(tree).shape == (6, 2, 5)
    out = nx.vmap(lambda d, x: d["a"] + d["b"] + x, in_dims=({"a": None, "b": 0}, None),
                  **kw)({"a": 0., "b": torch.arange(5.)}, 1.)
    assert torch.equal(out, torch.tensor([1., 2., 3., 4., 5.]))


@pytest.mark.parametrize("kw", KW)
def test_unmapped_and_broadcast_results(kw):
    f = lambda x, y: (x + y, y * 2.)   # noqa: E731
    a, b = nx.vmap(f, in_dims=(0, None), out_dims=(0, None), **kw)(torch.arange(2.), 4.)
    assert torch.equal(a, torch.tensor([4., 5.])) and b == 8.0
    # JAX: (Array([4., 5.]), Array([8., 8.]))
    a, b = nx.vmap(f, in_dims=(0, None), out_dims=0, **kw)(torch.arange(2.), 4.)
    assert torch.equal(a, torch.tensor([4., 5.])) and torch.equal(b, torch.tensor([8., 8.]))
    c = nx.vmap(lambda x: 3, **kw)(torch.arange(2.))
    assert torch.equal(c, torch.tensor([3, 3]))


def test_psum_over_the_named_axis():
    xs = torch.arange(12.).reshape(3, 4)
    out = nx.vmap(lambda x: nx.lax.psum(x, "i"), axis_name="i")(xs)
    assert torch.equal(out, torch.tensor([[12., 15., 18., 21.]] * 3))
