"""nx.grad with respect to an integer argument (inside xmap or not) raised torch's bare
``RuntimeError: only Tensors of floating point dtype can require gradients``; JAX 0.4.30
refuses it with a TypeError naming the dtype.  Now an AxisTypeError (a TypeError)
naming the argument and its dtype; integer arguments left out of argnums still work."""
import pytest
import torch

import named_axes as nx

W = torch.tensor([1., 2., 3.])
K = torch.arange(6).reshape(2, 3)


def test_integer_argument_named_in_the_error():
    with pytest.raises(nx.AxisTypeError, match=r"argument 0 has dtype torch.int64"):
        nx.grad(lambda k: (k * 2.).sum())(torch.arange(3))


def test_integer_argument_inside_xmap():
    body = lambda k, w: nx.grad(lambda w, k: (k * w).sum(), argnums=(0, 1))(w, k)  # noqa
    f = nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=(['b', ...], ['b', ...]))
    with pytest.raises(TypeError, match=r"argument 1 has dtype torch.int64"):
        f(K, W)


def test_integer_argument_outside_argnums_is_fine():
    body = lambda k, w: nx.grad(lambda w, k: (k * w).sum())(w, k)  # noqa: E731
    out = nx.xmap(body, in_axes=(['b', ...], [...]), out_axes=['b', ...])(K, W)
    torch.testing.assert_close(out, K.float())
