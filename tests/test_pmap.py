"""``nx.pmap`` in one process (``jax.pmap``'s signature over this process's devices):
``in_axes`` as a pytree prefix (ints, None, tuples, lists, dicts), ``out_axes``,
collectives over ``axis_name``, and its errors.  tests/parallel runs it over real ranks.
"""
from __future__ import annotations

import re

import pytest
import torch

import named_axes as nx


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(4, 3)


def test_collectives_over_the_mapped_axis(x):
    centred = nx.pmap(lambda a: a - nx.lax.pmean(a, "i"), axis_name="i")(x)
    torch.testing.assert_close(centred, x - x.mean(0))
    total = nx.pmap(lambda a: nx.lax.psum(a, "i"), axis_name="i", out_axes=None)(x)
    torch.testing.assert_close(total, x.sum(0))
    index = nx.pmap(lambda: nx.lax.axis_index("i"), axis_name="i", in_axes=(), axis_size=3)()
    assert index.tolist() == [0, 1, 2]


@pytest.mark.parametrize("in_axes, f, args", [
    ((0, None), lambda a, b: a + b, lambda x: (x, torch.ones(3))),
    (({"a": 1, "b": None},), lambda d: d["a"] + d["b"],
     lambda x: ({"a": x.T, "b": torch.ones(3)},)),
    (((None, 0),), lambda t: t[0] + t[1], lambda x: ((torch.ones(3), x),)),
    ([0, 0], lambda a, b: a + b, lambda x: (x, torch.ones(4, 3))),
])
def test_in_axes_is_a_pytree_prefix(in_axes, f, args, x):
    """The mapped size comes from the first mapped leaf, wherever it sits in the tree
    (a dict's entry included, as jax.pmap reads it)."""
    torch.testing.assert_close(nx.pmap(f, in_axes=in_axes)(*args(x)), x + 1)


def test_out_axes_places_the_mapped_axis(x):
    torch.testing.assert_close(nx.pmap(lambda a: a * 2, in_axes=1, out_axes=1)(x), x * 2)
    named = nx.pmap(lambda a: a * 2)(nx.named(torch.stack([x, -x]), "N"))
    assert named.named_shape == {"N": 2}
    torch.testing.assert_close(nx.positional(named, ["N", ...]), torch.stack([x, -x]) * 2)


def test_errors_name_what_is_wrong(x):
    with pytest.raises(nx.AxisSpecError, match=r"pmap\(<lambda>, in_axes=\(None,\)\): no "
                                                r"argument is mapped; give axis_size="):
        nx.pmap(lambda a: a, in_axes=(None,))(x)
    with pytest.raises(nx.AxisSpecError, match=r"pmap: in_axes='x': expected an int, None, "
                                                r"or a tuple/list/dict of them"):
        nx.pmap(lambda a: a, in_axes="x")
    with pytest.raises(nx.AxisSpecError, match=r"pmap: in_axes=3 for an argument with 2 "
                                                r"positional dims \(shape \(4, 3\)\)"):
        nx.pmap(lambda a: a, in_axes=3)(x)
    with pytest.raises(nx.AxisSpecError, match="the output has named axis"):
        nx.pmap(lambda a: a, out_axes=None)(x)   # it varies along the mapped axis
    with pytest.raises(nx.AxisSpecError, match=re.escape(
            """has keys ["'a'"] but the value has keys ["'a'", "'b'"]""")):   # jax: a tree prefix
        nx.pmap(lambda d: d["a"], in_axes=({"a": 1},))({"a": x.T, "b": torch.ones(3)})


def test_axis_size_that_disagrees_with_the_mapped_arguments_is_refused():
    # JAX 0.4.30: ValueError "Specified axis_size 4 doesn't match received axis_size 2."
    with pytest.raises(nx.AxisSizeError, match=r"axis_size=4\): the mapped arguments have size 2"):
        nx.pmap(lambda x: x * 2, axis_size=4)(torch.ones(2, 3))
    assert torch.equal(nx.pmap(lambda x: x * 2, axis_size=2)(torch.ones(2, 3)),
                       torch.full((2, 3), 2.))
