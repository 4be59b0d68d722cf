"""numpy arrays as operands of named values: converted once, alike everywhere (each test
failed before its fix)."""
from __future__ import annotations

import numpy as np
import torch

import named_axes as nx


def test_a_0d_numpy_operand_stays_0d():
    # np.ascontiguousarray made a 0-d array 1-d: x + np.array(2.) gained a positional dim
    x = nx.named(torch.ones(2), 'a')
    y = x + np.array(2.0)
    assert tuple(y.shape) == () and y.named_shape == {'a': 2}
    assert torch.equal(nx.positional(y, 'a'), torch.full((2,), 3.0))
    z = x.clone()
    z.add_(np.array(2.0))
    assert tuple(z.shape) == () and torch.equal(nx.positional(z, 'a'), torch.full((2,), 3.0))


def test_a_0d_numpy_operand_of_a_numpy_ufunc_stays_0d():
    # np.multiply(named, 0-d array) went through __array_ufunc__'s own conversion, which
    # made the 0-d array 1-d
    v = nx.named(torch.ones(2), 'b')
    y = np.multiply(v, np.array(2.0))
    assert tuple(y.shape) == () and y.named_shape == {'b': 2}
    assert torch.equal(nx.positional(y, 'b'), torch.full((2,), 2.0))


def test_numpy_arrays_convert_alike_everywhere():
    # one conversion (_layout.from_numpy): 0-d stays 0-d, negative strides are copied
    rev = np.arange(3.0, dtype=np.float32)[::-1]
    x = nx.named(torch.zeros(2, 3), 'a ...')
    assert torch.equal(nx.positional(x + rev, 'a'), torch.tensor([[2.0, 1.0, 0.0]] * 2))
    f = nx.xmap(lambda a, s: a * s, in_axes=(['a', ...], [...]), out_axes=['a', ...])
    assert torch.equal(f(np.ones((2, 3), dtype=np.float32), np.array(2.0, dtype=np.float32)),
                       torch.full((2, 3), 2.0))
    assert torch.equal(nx.jit(lambda a: a * 2)(rev), torch.tensor([4.0, 2.0, 0.0]))
