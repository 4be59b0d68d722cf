"""Regressions found while reading the dispatcher and its rules (each failed before its fix)."""
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
