"""nx.grad inside xmap through an nx.vmap whose body psums a named axis away: the
mapped result comes back positional (no named axis), and the gradient still carries
each instance's value (JAX 0.4.30's xmap: psum transposes to psum).

Expected values measured with jax==0.4.30 (``.venv-jax``)::

    xmap(lambda x, w: grad(lambda w: vmap(lambda r: psum((r * w).sum(), 'b'))(
        jnp.stack([x, x * 2])).sum())(w), (['b', ...], [...]), ['b', ...])
"""
import torch

import named_axes as nx
from named_axes import lax

X = torch.tensor([[1., 2., 3.], [4., 5., 6.]]) * 0.1
W = torch.tensor([1., 2., 3.])


def _run(inner):
    body = lambda x, w: nx.grad(lambda w: inner(x, w))(w)   # noqa: E731
    return nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=['b', ...])(X, W)


def test_vmap_of_psum_to_a_plain_result():
    out = _run(lambda x, w: nx.vmap(lambda r: lax.psum((r * w).sum(), 'b'))(
        torch.stack([x, x * 2])).sum())
    torch.testing.assert_close(out, torch.tensor([[0.6, 1.2, 1.8], [2.4, 3.0, 3.6]]))


def test_vmap_of_psum_keeping_positional_dims():
    out = _run(lambda x, w: nx.vmap(lambda r: lax.psum(r * w, 'b'))(
        torch.stack([x, x * 2])).sum())
    torch.testing.assert_close(out, torch.tensor([[0.6, 1.2, 1.8], [2.4, 3.0, 3.6]]))


def test_vmap_without_collective():
    out = _run(lambda x, w: nx.vmap(lambda r: (r * w).sum())(torch.stack([x, x * 2])).sum())
    torch.testing.assert_close(out, 3 * X)
