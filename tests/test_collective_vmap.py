"""Every collective under ``torch.func.vmap`` of an xmap, run eagerly, traced by make_fx
(the custom op's own vmap rule) and compiled by ``nx.jit``, equals the loop over the
vmapped index.  The batch size equals the named axis size so that a rule that puts the
batch dim in the wrong place gives a wrong answer, not a shape error."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import named_axes as nx
from named_axes import lax

N = 4   # the size of 'i' and of the vmapped dim

BODIES = {
    "psum": lambda x: lax.psum(x, "i"),
    "pmean": lambda x: lax.pmean(x, "i"),
    "pmax": lambda x: lax.pmax(x, "i"),
    "pmin": lambda x: lax.pmin(x, "i"),
    "all_gather": lambda x: lax.all_gather(x, "i", axis=1),
    "all_gather_tiled": lambda x: lax.all_gather(x, "i", axis=0, tiled=True),
    "psum_scatter": lambda x: lax.psum_scatter(x, "i", scatter_dimension=0),
    "psum_scatter_tiled": lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
    "all_to_all": lambda x: lax.all_to_all(x, "i", 0, 1),
    "ppermute": lambda x: lax.ppermute(x, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "pdot": lambda x: lax.pdot(x, x, "i"),
    "axis_index": lambda x: x * lax.axis_index("i"),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_vmap_of_a_collective_matches_the_loop(name):
    f = nx.xmap(BODIES[name], in_axes=["i", ...], out_axes=["i", ...])
    x = torch.randn(N, N, N, 4, dtype=torch.float64)   # (vmapped, 'i', positional...)
    want = torch.stack([f(x[b]) for b in range(N)])
    batched = torch.func.vmap(f)
    torch.testing.assert_close(batched(x), want)
    torch.testing.assert_close(make_fx(batched)(x)(x), want)
    torch.testing.assert_close(nx.jit(batched)(x), want)
