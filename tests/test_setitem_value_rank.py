"""``x[index] = value`` on a named ``x`` with a value of more positional dims than the
indexing result: torch drops the value's extra leading dims of size 1 and refuses others,
per instance.  The extra dims used to broadcast against the named dims of the physical
tensor: ``x[0:2] = torch.randn(2, 2)`` on ``x`` of named shape ``{'N': 2}`` and positional
shape ``(3,)`` wrote row ``i`` of the value into instance ``i``, where each instance's
assignment raises.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.randn(2, 3)


def _set(x, index, value):
    x[index] = value
    return x


@pytest.mark.parametrize("index", [slice(0, 2), torch.tensor([0, 2])], ids=["slice", "advanced"])
@pytest.mark.parametrize("value", [torch.randn(2, 2), nx.named(torch.randn(2, 2, 2), 'N ...')],
                         ids=["plain", "named"])
def test_a_value_of_too_many_positional_dims_is_refused(index, value):
    with pytest.raises(RuntimeError):
        _set(X[0].clone(), index, torch.randn(2, 2))
    x = nx.named(X.clone(), 'N ...')
    with pytest.raises(nx.ShapeError, match=r"value tensor of positional shape \(2, 2\) cannot "
                                            r"be broadcast to the indexing result's positional "
                                            r"shape \(2,\)"):
        _set(x, index, value)
    assert torch.equal(nx.positional(x, 'N ...'), X)


@pytest.mark.parametrize("value, named", [(torch.randn(1, 1, 2), False),
                                          (torch.randn(2, 1, 2), True)], ids=["plain", "named"])
def test_extra_leading_ones_are_dropped_as_torch_does(value, named):
    x = nx.named(X.clone(), 'N ...')
    _set(x, slice(0, 2), nx.named(value, 'N ...') if named else value)
    want = torch.stack([_set(X[i].clone(), slice(0, 2), value[i] if named else value)
                        for i in range(2)])
    assert torch.equal(nx.positional(x, 'N ...'), want)
