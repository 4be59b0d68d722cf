"""``nx.pmap`` over XLA devices (4 virtual CPU devices) equals the vectorized run.  Its
mesh axis is named by an object, not a string, and the engine's partition spec named
mesh axes: torch-xla raised 'Spec type ... is not supported in partition spec'."""
from __future__ import annotations

import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402


def test_pmap_over_xla_devices():
    devs = P.devices("xla")
    if len(devs) < 4:
        pytest.skip(f"needs 4 XLA devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=4), got {len(devs)}")
    x = torch.arange(8.0).view(4, 2)
    f = lambda v: nx.lax.psum(v, "p") * nx.lax.axis_index("p")  # noqa: E731
    got = nx.pmap(f, axis_name="p", devices=devs[:4])(x)
    torch.testing.assert_close(got, nx.pmap(f, axis_name="p")(x))
