"""Regressions found while leaning the dispatcher's modules (worktree r2)."""
from __future__ import annotations

import numpy as np
import torch

import named_axes as nx


def test_function_forms_take_numpy_arrays_with_negative_strides():
    # nx.named took them; nx.sum & co. raised torch's raw ValueError on them
    a = np.arange(4.)[::-1]
    assert torch.equal(nx.sum(a, 0), torch.tensor(6., dtype=torch.float64))
    assert torch.equal(nx.softmax(a), torch.softmax(torch.tensor(a.copy()), -1))
