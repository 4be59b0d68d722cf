"""A tuple is no axis name: collectives read a tuple axis_name as several names, and JAX
0.4.30 refuses one in a spec (xmap(f, in_axes=[('a', 'b'), ...], ...) -> TypeError: Value
mapping specification in xmap in_axes pytree can be either ...). named_axes took it as
one name, which psum(x, ('a', 'b')) could not then reach."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.arange(12.).reshape(4, 3)


@pytest.mark.parametrize("call", [
    lambda: nx.xmap(lambda a: a, in_axes=[("a", "b"), ...], out_axes=[...]),
    lambda: nx.xmap(lambda a: a, in_axes=["i", ...], out_axes=["i", ("k",), ...],
                    axis_sizes={("k",): 2})(X),
    lambda: nx.named(X, [("a", "b"), ...]),
])
def test_a_tuple_name_is_refused(call):
    with pytest.raises(nx.AxisTypeError, match=r"is a tuple, which collectives read as "
                                                r"several axis names"):
        call()


def test_a_tuple_of_names_in_a_collective_still_means_several():
    f = nx.xmap(lambda a: nx.lax.psum(a, ("a", "b")), in_axes=["a", "b", ...], out_axes=[...])
    assert float(f(X)) == 66.0
