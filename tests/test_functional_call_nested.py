"""nx.nn.functional_call inside another one on the same module (a forward that calls
functional_call on itself or a submodule): when the inner call returns, the outer call's
values are back, as with torch.func.functional_call.  The inner call used to drop the
outer one's values, so the rest of the outer forward silently ran the module's own
parameters."""
from __future__ import annotations

import torch
from torch import nn

import named_axes as nx


class _SelfCalling(nn.Module):
    def __init__(self, call):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.call = call

    def forward(self, x, inner=None):
        if inner is None:
            return self.lin(x)
        return self.call(self, inner, (x,)) * 10 + self.lin(x)


def test_nested_functional_call_restores_the_outer_values():
    x = torch.ones(1, 2)
    outer = {"lin.weight": torch.zeros(2, 2), "lin.bias": torch.zeros(2)}
    inner = {"lin.weight": torch.ones(2, 2), "lin.bias": torch.ones(2)}
    want = torch.func.functional_call(_SelfCalling(torch.func.functional_call), outer,
                                      (x,), {"inner": inner})
    m = _SelfCalling(nx.nn.functional_call)
    got = nx.nn.functional_call(m, outer, (x,), {"inner": inner})
    torch.testing.assert_close(got, want)
    assert type(m.lin.weight) is nn.Parameter and "weight" not in vars(m.lin)


def test_nested_functional_call_with_named_values_matches_a_loop():
    xs = torch.randn(3, 2)
    outer = {"lin.weight": torch.randn(2, 2), "lin.bias": torch.randn(2)}
    inner_w = torch.randn(3, 2, 2)
    m = _SelfCalling(nx.nn.functional_call)

    def f(x, w):
        return nx.nn.functional_call(m, outer, (x,), {"inner": {"lin.weight": w}})

    got = nx.xmap(f, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])(xs, inner_w)
    want = torch.stack([torch.func.functional_call(
        _SelfCalling(torch.func.functional_call), outer, (xs[i],),
        {"inner": {"lin.weight": inner_w[i]}}) for i in range(3)])
    torch.testing.assert_close(got, want)
