"""A gradient's named shape is a function of the program, never of the data (issue 30
item 5; docs/guide.md §4).  JAX 0.4.30's xmap, run on the programs below:

    body = lambda w, c: jax.grad(lambda w: jax.lax.psum((w * c).sum(), 'j'))(w)
    xmap(body, in_axes=[[...], ['j', ...]], out_axes=['j', ...])(ones(3), c)   # 4 * c
    xmap(body, in_axes=[[...], ['j', ...]], out_axes=[...])(ones(3), c)
        # ValueError: vmap has mapped output (axis_name=j) but out_axes is None
        # for c = ones((4, 3)) and for c = randn(4, 3) alike
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _body(w, c):
    return nx.grad(lambda w: nx.lax.psum((w * c).sum(), "j"))(w)


DATA = {"ones": lambda: torch.ones(4, 3), "random": lambda: torch.randn(4, 3)}


@pytest.mark.parametrize("data", sorted(DATA))
def test_per_instance_gradient_values_match_jax(data):
    c = DATA[data]()
    f = nx.xmap(_body, in_axes=[[...], ["j", ...]], out_axes=["j", ...])
    torch.testing.assert_close(f(torch.ones(3), c), 4 * c)


@pytest.mark.parametrize("data", [
    "random",
    pytest.param("ones", marks=pytest.mark.xfail(strict=True, reason=(
        "issue 30 item 5 not done: transforms/_instances.drop_replicated folds a "
        "gradient's copies along 'j' when they happen to be equal, so with c = ones the "
        "gradient loses 'j' and out_axes=[...] is accepted; JAX rejects both"))),
])
def test_gradient_keeps_the_axis_whatever_the_data(data):
    f = nx.xmap(_body, in_axes=[[...], ["j", ...]], out_axes=[...])
    with pytest.raises(nx.AxisSpecError, match="named axis 'j'"):
        f(torch.ones(3), DATA[data]())
