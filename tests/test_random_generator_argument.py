"""A random op given its own ``generator=`` draws the same for the same seed on every
call: the per-instance shape check runs the op once on a copy and restored only torch's
global random state, so the first call (check uncached) drew other values than the
next ones.  Under SerialLoop each chunk draws from where the generator was (the second
chunk drew on from where the first left it)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.full((4, 3), 0.5, dtype=torch.float64)


def test_the_same_seed_draws_the_same_on_every_call():
    g = torch.Generator()
    f = nx.xmap(lambda x: torch.normal(x, 1.0, generator=g), in_axes=["i", ...],
                out_axes=["i", ...])
    outs = []
    for _ in range(3):
        g.manual_seed(0)
        outs.append(f(X))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


@pytest.mark.parametrize("chunks", [2, 4])
def test_serial_loop_chunks_draw_from_the_generator_as_the_vectorized_run(chunks):
    def run(resources):
        g = torch.Generator().manual_seed(0)
        body = lambda x: torch.bernoulli(x, generator=g) + torch.normal(x, 1.0, generator=g)  # noqa
        out = nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...],
                      axis_resources=resources)(X)
        return out, torch.rand(2, generator=g)   # (and where it left the generator)

    want, got = run({}), run({"i": nx.SerialLoop(chunks)})
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
