"""nx.nn.functional_call given different values for two names of one tied tensor
refuses, as torch.func.functional_call does (a ValueError there); it used to use one of
them silently.  One value given under both names is fine."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import named_axes as nx


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)
        self.b = nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.a(x) + 10 * self.b(x)


def test_different_values_for_tied_names_are_refused():
    m, x = _Tied(), torch.ones(1, 2)
    w1, w2 = torch.ones(2, 2), nx.named(torch.ones(3, 2, 2), ['i', ...])
    for given in ({"a.weight": w1, "b.weight": w2}, ({"a.weight": w1}, {"b.weight": w2})):
        with pytest.raises(ValueError):
            torch.func.functional_call(m, given, (x,))
        with pytest.raises(nx.AxisSpecError, match=r"'a.weight', 'b.weight' are tied"):
            nx.nn.functional_call(m, given, (x,))
    same = {"a.weight": w1, "b.weight": w1}
    torch.testing.assert_close(nx.nn.functional_call(m, same, (x,)),
                               torch.func.functional_call(m, same, (x,)))
    untied = {"a.weight": w1, "b.weight": 2 * w1}
    torch.testing.assert_close(nx.nn.functional_call(m, untied, (x,), tie_weights=False),
                               torch.func.functional_call(m, untied, (x,), tie_weights=False))
