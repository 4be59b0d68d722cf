"""nx.nn.functional_call given plain tensors only is torch.func.functional_call exactly
(after its own argument checks).  It used to shadow the module's parameters and buffers
with instance attributes, which a forward that reassigns a buffer (self.count =
self.count + 1) or reads self.parameters() / state_dict() does not see: the reassigned
buffer landed in the module for good, later reads got the stale value, and the given
dict was not updated -- silently unlike torch."""
from __future__ import annotations

import torch
from torch import nn

import named_axes as nx


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        self.count = self.count + 1
        return self.lin(x) * self.count + sum(p.sum() for p in self.parameters())


def test_plain_values_follow_torch_functional_call():
    x = torch.ones(1, 2)
    results = []
    for call in (torch.func.functional_call, nx.nn.functional_call):
        torch.manual_seed(0)
        m = _Counter()
        given = {"count": torch.tensor(5.), "lin.weight": torch.full((2, 2), 2.)}
        outs = [call(m, given, (x,)) for _ in range(2)]
        results.append((outs, given["count"].clone(), m.count.clone(), m.lin.weight.clone()))
    (want, want_count, want_module, want_w), (got, got_count, got_module, got_w) = results
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert got_count.item() == want_count.item() == 7.
    assert got_module.item() == want_module.item() == 0.
    torch.testing.assert_close(got_w, want_w)
