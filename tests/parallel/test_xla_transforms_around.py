"""torch.func transforms *around* an xmap on the torch-xla SPMD engine (4 virtual CPU
devices) give the vectorized run's values.  They used to raise torch-xla's raw errors:
mark_sharding refuses a functorch-wrapped tensor ('Expected XLA tensor. Got:
XLAFloatType'), and so did the engine's one-graph run of the outputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402


devices = pytest.fixture(scope="module", name="devices")(_xla_env.four_devices)


def _f(res):
    return nx.xmap(lambda v: nx.lax.psum(v.sin(), "i") * v, in_axes=[{0: "i"}],
                   out_axes=["i", ...], axis_resources=res)


TRANSFORMS = {
    "vmap": lambda f, x: torch.vmap(f)(x),
    "jacrev": lambda f, x: torch.func.jacrev(f)(x[0]),
    "jvp": lambda f, x: torch.func.jvp(f, (x[0],), (torch.ones(4, 2),))[1],
}


@pytest.mark.parametrize("how", list(TRANSFORMS))
def test_transform_around_the_xmap(devices, how):
    x = torch.randn(3, 4, 2)
    want = TRANSFORMS[how](_f({}), x)
    with P.Mesh(np.array(devices), ("x",)):
        got = TRANSFORMS[how](_f({"i": "x"}), x)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
