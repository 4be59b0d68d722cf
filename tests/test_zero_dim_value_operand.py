"""``x.fill_(v)`` and ``x.masked_fill(mask, v)`` with a named ``v`` that has no positional
dims: each instance fills with its own zero-dim value, as the loop over the named indices
does.  The elementwise kernel used to hand torch the physical ``v`` (its named dims
leading), which these ops refuse ("fill_ only supports 0-dimension value tensor"): a
ShapeError for calls every instance makes.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.randn(2, 3)
V = torch.randn(2)
MASK = torch.tensor([True, False, True])


@pytest.mark.parametrize("call", [
    lambda x, v: x.fill_(v),
    lambda x, v: x.masked_fill_(MASK, v),
    lambda x, v: x.masked_fill(MASK, v),
    lambda x, v: x.masked_fill(MASK, value=v),
    lambda x, v: torch.masked_fill(x, MASK, v),
], ids=["fill_", "masked_fill_", "masked_fill", "masked_fill-kw", "torch.masked_fill"])
def test_a_named_zero_dim_value_fills_each_instance(call):
    want = torch.stack([call(X[i].clone(), V[i]) for i in range(2)])
    got = call(nx.named(X.clone(), 'N ...'), nx.named(V, 'N'))
    assert got.named_shape == {'N': 2}
    assert torch.equal(nx.positional(got, 'N ...'), want)


def test_a_plain_target_filled_per_instance():
    got = X[0].masked_fill(MASK, nx.named(V, 'N'))
    want = torch.stack([X[0].masked_fill(MASK, V[i]) for i in range(2)])
    assert torch.equal(nx.positional(got, 'N ...'), want)


def test_a_value_with_positional_dims_is_torchs_error():
    with pytest.raises(nx.ShapeError, match="0-dimension value tensor"):
        nx.named(X.clone(), 'N ...').fill_(nx.named(torch.randn(2, 1), 'N ...'))
