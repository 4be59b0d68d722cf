"""nx.grad of an nx.jacrev / nx.jacfwd inside xmap, the named value closed over: the
outer grad's first run meets the axis late and runs again; the regions it opened must
be closed one by one (two regions' recorded axes may be equal dicts).  It raised a bare
``ValueError: list.remove(x): x not in list``.

Expected values measured with jax==0.4.30 (``.venv-jax``)::

    xmap(lambda x, w: grad(lambda w: (jacrev(lambda w: jnp.sin(x * w))(w) ** 2).sum())(w),
         (['b', ...], [...]), ['b', ...])
"""
import pytest
import torch

import named_axes as nx
from named_axes import lax

X = torch.tensor([[1., 2., 3.], [4., 5., 6.]]) * 0.1
W = torch.tensor([1., 2., 3.])


def _run(inner):
    body = lambda x, w: nx.grad(lambda w: inner(x, w))(w)   # noqa: E731
    return nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=['b', ...])(X, W)


@pytest.mark.parametrize("jac", [nx.jacrev, nx.jacfwd])
def test_grad_of_jacobian_of_closure(jac):
    out = _run(lambda x, w: (jac(lambda w: torch.sin(x * w))(w) ** 2).sum())
    want = torch.tensor([[-0.00019867, -0.00573885, -0.02629389],
                         [-0.04591079, -0.11366217, 0.09558446]])
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-6)


def test_grad_of_jacrev_of_psum():
    out = _run(lambda x, w: nx.jacrev(lambda w: lax.psum(torch.sin(x * w), 'b'))(w).sum())
    want = torch.tensor([[-0.00199667, -0.03115347, -0.14099886],
                         [-0.12461387, -0.42073548, -0.70117038]])
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-6)
