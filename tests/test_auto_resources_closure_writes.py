"""axis_resources='auto' (and nx.plan_resources / nx.explain_resources) trace the program
on fake values to cost it; a tensor it closes over and writes (a counter, a module's
num_batches_tracked) is written in its fake only.  The trace used to write the real one,
so the first call of an 'auto' xmap counted twice and planning alone counted too:
assigning resources changed the result."""
from __future__ import annotations

import numpy as np
import torch

import named_axes as nx


def test_auto_planning_writes_no_closed_over_tensor():
    counter = torch.zeros(())

    def body(x):
        counter.add_(1)
        return x.sum()

    f = nx.xmap(body, in_axes=['b', ...], out_axes=['b', ...], axis_resources='auto')
    x = torch.randn(8, 4, 5)
    mesh = nx.Mesh(np.array(nx.devices()[:1]), ('x',))
    nx.plan_resources(f, mesh, x)
    nx.explain_resources(f, mesh, x)
    assert counter.item() == 0
    with mesh:
        out = f(x)
    torch.testing.assert_close(out, x.sum((1, 2)))
    assert counter.item() == 1
