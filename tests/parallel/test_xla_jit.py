"""``nx.jit`` of a call on torch-xla (4 virtual CPU devices) runs inline: torch-xla
compiles its lazy graphs itself, while inductor has no XLA code and the trace's fake
tensors cannot be sharded.  It used to raise torch's raw errors (a storage without an
address in the call key, inductor's KeyError 'xla', mark_sharding on a fake tensor)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402
from named_axes.parallel._xla import xla_device  # noqa: E402


devices = pytest.fixture(scope="module", name="devices")(_xla_env.four_devices)


def test_jit_of_xla_tensors(devices):
    a, b = torch.randn(3), torch.randn(3)
    f = nx.jit(lambda a, b: a * b + 1)
    got = f(a.to(xla_device()), b.to(xla_device()))
    assert got.device.type == "xla"
    torch.testing.assert_close(got.cpu(), a * b + 1)
    assert f.stats()["inline"] == 1


def test_jit_of_an_xmap_on_the_xla_mesh(devices):
    g = nx.xmap(lambda v: nx.lax.psum(v, "b") * nx.lax.axis_index("b"), in_axes=[["b", ...]],
                out_axes=["b", ...], axis_resources={"b": "x"})
    x = torch.randn(4, 3)
    with P.Mesh(np.array(devices), ("x",)):
        got = nx.jit(g)(x)
    want = nx.xmap(lambda v: nx.lax.psum(v, "b") * nx.lax.axis_index("b"), in_axes=[["b", ...]],
                   out_axes=["b", ...])(x)
    torch.testing.assert_close(got, want)


def test_jit_of_a_program_closing_over_an_xla_tensor(devices):
    w = torch.randn(3)
    w_xla = w.to(xla_device())
    f = nx.jit(lambda x: (x.to(w_xla.device) * w_xla).cpu())   # CPU in, CPU out
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * w)
    torch.testing.assert_close(f(x + 1), (x + 1) * w)
    assert f.stats()["inline"] == 2
