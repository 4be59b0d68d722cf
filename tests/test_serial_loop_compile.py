"""torch.compile of a SerialLoop xmap equals the eager run: dynamo traced the loop's
replay (it resumed after the graph break at the seed's ``.item()``), and a loop
collective answered with the chunk's own partial -- psum(x, 'i') gave each chunk's sum,
silently.  The loop now runs eagerly, outside dynamo's graph."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

L = nx.lax
X = torch.arange(24, dtype=torch.float64).reshape(8, 3)

BODIES = {
    "psum": lambda x: L.psum(x, "i") * x,
    "pmax then pmean": lambda x: L.pmean(L.pmax(x, "i") - x, "i") + x.sin(),
    "dropout and psum": lambda x: F.dropout(x + 1, 0.5) + L.psum(x, "i"),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_torch_compile_of_a_serial_loop_xmap_equals_eager(name):
    f = BODIES[name]
    runs = []
    for compile_it in (False, True):
        xm = nx.xmap(f, in_axes=["i", ...], out_axes=["i", ...],
                     axis_resources={"i": nx.SerialLoop(2)})
        torch.manual_seed(0)
        x = X.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (dynamo's note on the graph break)
            out = (torch.compile(xm, backend="eager") if compile_it else xm)(x)
        runs.append((out.detach(), torch.autograd.grad((out * out).sum(), x)[0]))
    torch.testing.assert_close(runs[1], runs[0])
