"""A collective over the SerialLoop axes of two nested xmaps (JAX's testNestedMesh with loops
in place of its mesh axes): each loop replays only its own pauses, so the inner loop passes
the outer one's on instead of replaying it forever (it hung)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = nx.lax
SL = nx.SerialLoop

pytestmark = pytest.mark.timeout(60)


def test_nested_mesh_with_serial_loops():
    def f(x):
        h = lambda y: (torch.sin(y) * torch.arange(5.), L.psum(y, ('a', 'b')))
        return nx.xmap(h, in_axes={0: 'b'}, out_axes=({1: 'b'}, {}),
                       axis_resources={'b': SL(2)})(x * 2)
    x = torch.arange(40, dtype=torch.float64).reshape(4, 2, 5)
    out = nx.xmap(f, in_axes={1: 'a'}, out_axes=({0: 'a'}, {}), axis_resources={'a': SL(2)})(x)
    torch.testing.assert_close(out, ((torch.sin(x * 2) * torch.arange(5.)).permute(1, 2, 0),
                                     (x * 2).sum((0, 1))), check_dtype=False)


BODIES = {
    'psum_ab': lambda y: L.psum(y, ('a', 'b')),
    'psum_ba': lambda y: L.psum(y, ('b', 'a')),
    'psum_a_then_b': lambda y: L.psum(L.psum(y, 'a') * y, 'b'),
    'pmax_ab': lambda y: L.pmax(y, ('a', 'b')),
    'pmin_b_then_a': lambda y: L.pmin(L.pmin(y, 'b'), 'a'),
    'pmean_ab': lambda y: L.pmean(y, ('a', 'b')),
    'psum_tree': lambda y: L.psum((y, y * 2), ('a', 'b'))[1],
    'pdot_ab': lambda y: L.pdot(y, y, ('a', 'b')),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_nested_loop_collectives_match_vectorized(name):
    x = torch.randn(4, 6, 3, dtype=torch.float64)

    def run(ra, rb):
        inner = lambda v: nx.xmap(BODIES[name], in_axes={0: 'b'}, out_axes={0: 'b'},
                                  axis_resources=rb)(v)
        return nx.xmap(inner, in_axes={0: 'a'}, out_axes={0: 'a'}, axis_resources=ra)(x)
    want = run(None, None)
    for ra, rb in [({'a': SL(2)}, {'b': SL(2)}), ({'a': SL(4)}, {'b': SL(3)})]:
        torch.testing.assert_close(run(ra, rb), want)
