"""A mesh over some of the XLA devices (torch-xla's SPMD program spans all of them)
raises an AxisResourceError naming the device count, not torch-xla's raw
AssertionError ('Number of device IDs (2) must match the global number of devices')."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402


def test_a_mesh_over_some_xla_devices_raises():
    devs = P.devices("xla")
    if len(devs) < 4:
        pytest.skip(f"needs 4 XLA devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=4), got {len(devs)}")
    f = nx.xmap(lambda v: nx.lax.psum(v, "i"), in_axes=[["i", ...]], out_axes=[...],
                axis_resources={"i": "x"})
    with P.Mesh(np.array(devs[:2]), ("x",)):
        with pytest.raises(nx.AxisResourceError, match=f"all {len(devs)} XLA devices"):
            f(torch.ones(4, 3))
