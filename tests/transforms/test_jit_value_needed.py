"""A jitted program that needs a traced tensor's value as a Python value (an ``if`` on
a tensor, ``int()`` of one returned) raises a NamedAxisError naming the program and the
ways out, as JAX's jit raises its ConcretizationTypeError: not torch's raw
data-dependent guard error."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _branches(x):
    return x if x.sum() > 0 else -x


@pytest.mark.parametrize("fun", [_branches, lambda x: (x * 2, int(x.sum()))])
def test_python_value_of_a_traced_tensor(fun):
    f = nx.jit(fun, backend="eager")
    with pytest.raises(nx.AxisTypeError, match=r"jit\(.*\): the program needs a tensor's value"
                       r".*static_argnums"):
        f(torch.ones(2))
    with nx.disable_jit():
        assert f(torch.ones(2)) is not None



@pytest.mark.parametrize("read", [lambda t: t.item(), lambda t: t.long().item()])
def test_item_used_as_a_number_under_inductor(read):
    f = nx.jit(lambda x: x * read(x.sum()))
    with pytest.raises(nx.AxisTypeError, match=r"the program needs a tensor's value.*\.item\(\)"):
        f(torch.ones(2))
