"""``x.nbytes`` of a named value counts the positional elements, as ``x.numel()`` does
(per instance of the named axes, as under vmap).  It used to come from the physical tensor
(``__getattr__``'s fallback): every instance's bytes, while ``numel()`` counted one's.
"""
from __future__ import annotations

import torch

import named_axes as nx


def test_nbytes_is_numel_times_itemsize():
    x = nx.named(torch.zeros(2, 3, dtype=torch.float64), 'N ...')
    assert x.numel() == 3 and x.nbytes == 3 * 8 == x.numel() * x.itemsize
    assert torch.func.vmap(lambda t: torch.tensor(t.nbytes))(torch.zeros(2, 3))[0] == 12
    assert nx.named(torch.zeros(4, 5), {1: 'b'}).nbytes == 4 * 4
