"""numpy arrays with negative strides meet named values as torch tensors do (nx.sum,
``x * ndarray``): once a raw error or a ShapeError blaming the shapes."""
from __future__ import annotations

import numpy as np
import torch

import named_axes as nx


def test_function_forms_take_numpy_arrays_with_negative_strides():
    # nx.named took them; nx.sum & co. raised torch's raw ValueError on them
    a = np.arange(4.)[::-1]
    assert torch.equal(nx.sum(a, 0), torch.tensor(6., dtype=torch.float64))
    assert torch.equal(nx.softmax(a), torch.softmax(torch.tensor(a.copy()), -1))


def test_operators_take_numpy_arrays_with_negative_strides():
    # `arr + x` and `torch.ones(3) * arr` worked; `x * arr` raised a ShapeError that
    # blamed the positional shapes
    x = nx.named(torch.ones(2, 3), 'b ...')
    a = np.arange(3.)[::-1]
    out = x * a
    assert out.named_shape == {'b': 2}
    assert torch.equal(nx.positional(out), torch.tensor([[2., 1., 0.]] * 2, dtype=torch.float64))
