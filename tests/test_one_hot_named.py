"""nx.one_hot along a named axis the labels already carry (issue 31, item 3).

JAX 0.4.30's ``jax.nn.one_hot(labels, n, axis=name)`` is ``labels == lax.axis_index(name)``
once ``n`` equals the axis size: labels carrying the axis keep it once, each instance
compared with its own index.  Expected values below were computed with .venv-jax:

    L = np.array([[0, 2], [1, 1], [2, 0]])
    xmap(lambda l: jax.nn.one_hot(l, 3, axis='i'), in_axes=['i', ...], out_axes=['i', ...])(L)
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = torch.tensor([[0, 2], [1, 1], [2, 0]])
_I = dict(in_axes=['i', ...], out_axes=['i', ...])


def test_labels_carrying_the_axis_compare_with_their_index():
    f = nx.xmap(lambda y: nx.one_hot(y, 3, dim='i', dtype=torch.float32), **_I)
    torch.testing.assert_close(f(L), torch.tensor([[1., 0.], [1., 1.], [1., 0.]]))
    g = nx.xmap(lambda y: nx.one_hot(y, 3, axis='i', dtype=torch.int32), **_I)   # axis= alias
    torch.testing.assert_close(g(L), torch.tensor([[1, 0], [1, 1], [1, 0]], dtype=torch.int32))
    # labels out of range match no index (jax: [0., 0., 1.])
    h = nx.xmap(lambda y: nx.one_hot(y, 3, dim='i'), **_I)
    torch.testing.assert_close(h(torch.tensor([-1, 3, 2])), torch.tensor([0, 0, 1]))


def test_labels_lacking_the_axis_and_a_second_named_axis():
    # jax: one_hot(L[0], 3, axis='i') with axis_sizes={'i': 3}: [[1, 0], [0, 0], [0, 1]]
    f = nx.xmap(lambda y: nx.one_hot(y, 3, dim='i'), in_axes=[...], out_axes=['i', ...],
                axis_sizes={'i': 3})
    torch.testing.assert_close(f(L[0]), torch.tensor([[1, 0], [0, 0], [0, 1]]))
    # jax: labels carrying 'i' and 'j', one_hot(l, 2, axis='j'): [[1, 0], [0, 1], [0, 0]]
    g = nx.xmap(lambda y: nx.one_hot(y, 2, dim='j'), in_axes=['i', 'j', ...],
                out_axes=['i', 'j', ...])
    torch.testing.assert_close(g(L), torch.tensor([[1, 0], [0, 1], [0, 0]]))
    # the same outside any map: the axis the labels carry
    out = nx.one_hot(nx.named(L, 'i j ...'), 2, dim='j')
    assert out.named_shape == {'i': 3, 'j': 2} and out.shape == ()
    torch.testing.assert_close(nx.positional(out, 'i j ...'), g(L))


def test_num_classes_must_be_the_axis_size():
    # jax: ValueError "Expected num_classes to match the size of axis i, but 4 != 3"
    with pytest.raises(nx.AxisSizeError, match=r"one_hot\(dim='i'\): num_classes=4 but axis "
                                               r"'i' is bound with size 3"):
        nx.xmap(lambda y: nx.one_hot(y, 4, dim='i'), **_I)(L)
    with pytest.raises(nx.AxisSizeError, match=r"num_classes=2 but axis 'i' is carried by the "
                                               r"labels with size 3"):
        nx.one_hot(nx.named(L, 'i ...'), 2, dim='i')


def test_gradient_jit_eval_shape_and_serial_loop():
    x = torch.randn(3, 2, dtype=torch.float64)
    mask = torch.tensor([[1., 0.], [1., 1.], [1., 0.]], dtype=torch.float64)
    loss = nx.xmap(lambda y, v: nx.lax.psum(nx.one_hot(y, 3, dim='i', dtype=v.dtype) * v, 'i'),
                   in_axes=(['i', ...], ['i', ...]), out_axes=[...])
    torch.testing.assert_close(loss(L, x), (mask * x).sum(0))
    g = nx.grad(lambda v: loss(L, v).sum())(x)
    torch.testing.assert_close(g, mask)
    f = nx.xmap(lambda y: nx.one_hot(y, 3, dim='i'), **_I)
    j = nx.jit(f)
    torch.testing.assert_close(j(L), f(L))
    torch.testing.assert_close(j(L.flip(0)), f(L.flip(0)))
    s = nx.eval_shape(f, L)
    assert s.shape == (3, 2) and s.dtype == torch.int64 and s.named_shape == {}
    # an engine holding part of 'i' per chunk compares with the indices it holds
    L4 = torch.tensor([[0, 3], [1, 1], [2, 0], [3, 3]])
    h = nx.xmap(lambda y: nx.one_hot(y, 4, dim='i'), axis_resources={'i': nx.SerialLoop(2)}, **_I)
    torch.testing.assert_close(h(L4), torch.tensor([[1, 0], [1, 1], [1, 0], [1, 1]]))
