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
