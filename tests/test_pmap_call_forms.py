"""nx.pmap's calling conventions, pinned to JAX 0.4.30's jax.pmap (4 CPU devices; the
snippet of each measured value is in its comment)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import named_axes as nx

X = torch.arange(12.).reshape(4, 3)


def test_numpy_arguments_are_mapped():
    # pmap(lambda a: a * 2)(np.arange(4.)) -> [0., 2., 4., 6.]
    assert torch.equal(nx.pmap(lambda a: a * 2)(np.arange(4.)),
                       torch.tensor([0., 2., 4., 6.], dtype=torch.float64))


def test_a_mapped_python_number_is_refused():
    # pmap(lambda a, b: a * b)(x, 2.0) -> ValueError: pmap was requested to map its
    # argument along axis 0, which implies that its rank should be at least 1, but is only 0
    with pytest.raises(nx.AxisTypeError, match=r"maps argument 1, a float, which has no axes"):
        nx.pmap(lambda a, b: a * b)(X, 2.0)
    with pytest.raises(nx.AxisTypeError, match=r"maps argument 1\[1\], a float"):
        nx.pmap(lambda a, b: a * b[0])(X, (X, 2.0))
    # in_axes None passes it (and None leaves are empty subtrees)
    assert torch.equal(nx.pmap(lambda a, b: a * b, in_axes=(0, None))(X, 2.0), X * 2)
    assert torch.equal(nx.pmap(lambda a, b: a)(X, None), X)


def test_static_broadcasted_argnums():
    # pmap(lambda a, n: a * n, static_broadcasted_argnums=1)(x, 3) -> x * 3, and the same
    # with in_axes=(0, None), (0,) and (0, 0) (the static argument's entry is not read)
    for in_axes in (0, (0, None), (0,), (0, 0)):
        f = nx.pmap(lambda a, n: a * n, in_axes=in_axes, static_broadcasted_argnums=1)
        assert torch.equal(f(X, 3), X * 3)
    # pmap(lambda a, shp: a.reshape(shp), static_broadcasted_argnums=(1,))(x46, (2, 3))
    # -> shape (4, 2, 3)
    out = nx.pmap(lambda a, shp: a.reshape(shp), static_broadcasted_argnums=(1,))(
        torch.arange(24.).reshape(4, 6), (2, 3))
    assert torch.equal(out, torch.arange(24.).reshape(4, 2, 3))
    # pmap(lambda s, a: a * len(s), static_broadcasted_argnums=(0,), out_axes=1)("ab", x)
    out = nx.pmap(lambda s, a: a * len(s), static_broadcasted_argnums=(0,), out_axes=1)("ab", X)
    assert torch.equal(out, (X * 2).T)
    # ... static_broadcasted_argnums=3)(x, 3) -> ValueError: pmapped function has
    # static_broadcasted_argnums=(3,) but was called with only 2 positional arguments
    with pytest.raises(nx.AxisSpecError, match=r"static_broadcasted_argnums=\(3,\) names "
                                                r"argument 3, but the call has 2 positional"):
        nx.pmap(lambda a, n: a * n, static_broadcasted_argnums=3)(X, 3)


def test_keyword_arguments_are_mapped_over_their_leading_axis():
    # pmap(lambda a, b: a * b, in_axes=(1,))(x.T, b=x) -> x * x (b mapped over axis 0)
    assert torch.equal(nx.pmap(lambda a, b: a * b, in_axes=(1,))(X.T, b=X), X * X)
    assert torch.equal(nx.pmap(lambda a, b=None: a * b, in_axes=1)(X.T, b=X), X * X)
    # pmap(lambda a, n, b=None: a * n + b, static_broadcasted_argnums=1)(x, 2, b=x) -> 3x
    f = nx.pmap(lambda a, n, b=None: a * n + b, static_broadcasted_argnums=1)
    assert torch.equal(f(X, 2, b=X), X * 3)
    # pmap(lambda a, b=None: psum(a * b, 'i'), axis_name='i')(x, b=x) -> (x*x).sum(0) per row
    g = nx.pmap(lambda a, b=None: nx.lax.psum(a * b, 'i'), axis_name='i')
    assert torch.equal(g(X, b=X), (X * X).sum(0).expand(4, 3))
    # pmap(lambda a, b=None: a * b)(x, b=2.0) -> ValueError (rank should be at least 1)
    with pytest.raises(nx.AxisTypeError, match=r"a float, which has no axes"):
        nx.pmap(lambda a, b=None: a * b)(X, b=2.0)
    # pmap(...)(x, b=ones(3, 3)) -> ValueError: pmap got inconsistent sizes
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes .* 4 .* vs 3"):
        nx.pmap(lambda a, b=None: a * b)(X, b=torch.ones(3, 3))
