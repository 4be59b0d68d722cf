"""nx.vmap(axis_name='i') given a value that already carries a named axis 'i' (made
outside any named program, with nx.named) is refused with our error. Before, a mapped one
failed with torch's raw "permute(sparse_coo): number of dimensions ... does not match",
and an unmapped one ran with two axes named 'i'."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = nx.named(torch.arange(24.).reshape(2, 3, 4), ["i", ...])


@pytest.mark.parametrize("call", [
    lambda: nx.vmap(lambda a: a * 2, axis_name="i")(X),
    lambda: nx.vmap(lambda a, b: a * b.sum(), in_dims=(None, 0), axis_name="i")(X, torch.ones(3)),
])
def test_an_input_carrying_the_axis_name_is_refused(call):
    with pytest.raises(nx.AxisSpecError, match=r"input 0 already has a named axis 'i' "
                                                r"\(named_shape \{'i': 2\}\); use a new axis_name"):
        call()


def test_another_name_maps_over_it():
    out = nx.vmap(lambda a: a * 2, axis_name="j")(X)
    assert out.named_shape == {"i": 2}
    assert torch.equal(nx.positional(out, ["i", ...]), torch.arange(24.).reshape(2, 3, 4) * 2)
