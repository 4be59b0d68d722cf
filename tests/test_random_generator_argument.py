"""A random op given its own ``generator=`` draws the same for the same seed on every
call: the per-instance shape check runs the op once on a copy and restored only torch's
global random state, so the first call (check uncached) drew other values than the
next ones."""
from __future__ import annotations

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
