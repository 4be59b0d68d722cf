"""An in-place op on a named value with no positional dims by a zero-dim tensor of a wider
dtype computes as each instance does: torch promotes two zero-dim operands together (a
float32 target times a float64 scalar is computed in float64, then rounded), where the
physical one-dim target computed in float32 (off by one ulp, silently)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _per_instance(op, data, other):
    return torch.stack([getattr(data[k].clone(), op)(other) for k in range(len(data))])


@pytest.mark.parametrize("op", ["mul_", "add_", "sub_", "div_"])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64), (torch.float16, torch.float32)])
def test_matches_torch_on_each_instance_bitwise(op, dtypes):
    data = torch.linspace(-3, 3, 64).to(dtypes[0])
    other = torch.tensor(1.1, dtype=dtypes[1])
    x = nx.named(data.clone(), "i")
    assert getattr(x, op)(other) is x and x.dtype == dtypes[0]
    assert torch.equal(x._data, _per_instance(op, data, other))
    f = nx.xmap(lambda v: getattr(v, op)(other), in_axes=["i"], out_axes=["i"])
    assert torch.equal(f(data.clone()), _per_instance(op, data, other))


def test_a_cast_torch_refuses_is_refused():
    x = nx.named(torch.arange(3), "i")
    with pytest.raises(nx.NamedAxisError, match="can't be cast to the desired output type Long"):
        x.mul_(torch.tensor(1.5, dtype=torch.float64))
    assert x._data.tolist() == [0, 1, 2]


def test_gradient_flows_through_the_write():
    w = torch.linspace(0, 1, 5, requires_grad=True)
    x = nx.named(w * 1, "i")
    x.mul_(torch.tensor(2.0, dtype=torch.float64))
    x._data.sum().backward()
    assert w.grad.tolist() == [2.0] * 5
