"""vmap around an xmap whose pmax / pmin reduces over a SerialLoop axis (nx.vmap,
torch.func.vmap, and the transforms built on it: jacfwd, vmap of grad): the combined
extreme of the loop's chunks runs per batch entry. It raised torch's raw "You tried to
vmap over _ExtremeOfChunks, but it does not have vmap support"."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = nx.lax
SL = nx.SerialLoop

BODIES = {
    'pmax': lambda y: L.pmax(y, 'a') * y,
    'pmin_with_positional': lambda y: L.pmin(y, ('a', 0)) + y,
}
W = torch.arange(12.).reshape(4, 3)
TRANSFORMS = {
    'nx.vmap': lambda f, x: nx.vmap(f)(x),
    'torch.func.vmap': lambda f, x: torch.func.vmap(f)(x),
    'vmap_of_grad': lambda f, x: torch.func.vmap(torch.func.grad(lambda v: (f(v) * W).sum()))(x),
    'jacfwd': lambda f, x: torch.func.jacfwd(f)(x[0]),
}


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("body", list(BODIES))
def test_vmap_of_xmap_with_loop_extreme_matches_vectorized(body, transform, ties):
    x = (torch.randint(0, 3, (2, 4, 3)).double() if ties
         else torch.randn(2, 4, 3, dtype=torch.float64))
    f = lambda res: nx.xmap(BODIES[body], in_axes={0: 'a'}, out_axes={0: 'a'},
                            axis_resources=res)
    want = TRANSFORMS[transform](f(None), x)
    torch.testing.assert_close(TRANSFORMS[transform](f({'a': SL(2)}), x), want)
