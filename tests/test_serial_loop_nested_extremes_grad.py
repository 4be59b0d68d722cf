"""The gradient of pmax / pmin over the SerialLoop axes of two nested xmaps: each loop
shares the cotangent among its chunks by how many entries attain the extreme, and a
partial that is the other loop's combined extreme must bring that loop's count over all
its chunks (counting only the running chunk gave 0/0: NaN gradients)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = nx.lax
SL = nx.SerialLoop

pytestmark = pytest.mark.timeout(60)

BODIES = {
    'pmax_ab': lambda y: L.pmax(y, ('a', 'b')),
    'pmax_ba': lambda y: L.pmax(y, ('b', 'a')),
    'pmin_ab': lambda y: L.pmin(y, ('a', 'b')),
    'pmax_b_then_a': lambda y: L.pmax(L.pmax(y, 'b') * y, 'a'),
    'pmax_with_positional': lambda y: L.pmax(y, ('a', 'b', 0)),
    'pmax_tree': lambda y: L.pmax((y, -y), ('a', 'b'))[1],
}


def _nested(ra, rb, body):
    inner = lambda v: nx.xmap(body, in_axes={0: 'b'}, out_axes={0: 'b'}, axis_resources=rb)(v)
    return lambda x: nx.xmap(inner, in_axes={0: 'a'}, out_axes={0: 'a'}, axis_resources=ra)(x)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", list(BODIES))
def test_nested_loop_extreme_gradient_matches_vectorized(name, ties):
    x = (torch.randint(0, 3, (4, 6, 3)).double() if ties
         else torch.randn(4, 6, 3, dtype=torch.float64))

    def value_and_grad(ra, rb):
        xx = x.clone().requires_grad_()
        out = _nested(ra, rb, BODIES[name])(xx)
        (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
        return out, xx.grad
    want = value_and_grad(None, None)
    for ra, rb in [({'a': SL(2)}, {'b': SL(2)}), ({'a': SL(4)}, {'b': SL(3)})]:
        torch.testing.assert_close(value_and_grad(ra, rb), want)
