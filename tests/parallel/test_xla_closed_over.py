"""CPU tensors an xmap on the torch-xla SPMD engine meets besides its inputs -- a
closed-over weight, a tensor made inside the program -- are read as the vectorized run
reads them (moved to XLA, whole on every device), their gradients reaching the CPU
weight.  They used to raise torch-xla's 'Expected XLA tensor' inside a ShapeError
that blamed the positional shapes."""
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


@pytest.mark.parametrize("res", [{"i": "x"}, {"i": ("x", P.SerialLoop(2))}])
def test_closed_over_weight_and_made_tensors(devices, res):
    w = torch.nn.Parameter(torch.randn(4, 2))

    def f(v):
        h = torch.tanh(v @ w)                                  # closed over
        s = torch.zeros(5).index_add(0, torch.tensor([0, 2, 2, 4]), v)   # made inside
        return nx.lax.psum(h.sum() + s.sum(), "i")

    x = torch.randn(8, 4)
    want = nx.xmap(f, in_axes=[["i", ...]], out_axes=[...])(x)
    want.backward()
    want_grad, w.grad = w.grad, None
    with P.Mesh(np.array(devices), ("x",)):
        got = nx.xmap(f, in_axes=[["i", ...]], out_axes=[...], axis_resources=res)(x)
    got.backward()
    torch.testing.assert_close(got, want)
    assert w.grad.device.type == "cpu"
    torch.testing.assert_close(w.grad, want_grad)


@pytest.mark.parametrize("res", [{"i": "x"}, {"i": ("x", P.SerialLoop(2))}])
def test_checkpoint_recomputes_with_the_weight_moved_alike(devices, res):
    w = torch.nn.Parameter(torch.randn(4, 4))

    def f(v):
        h = nx.checkpoint(lambda u: torch.sin(u @ w) * torch.arange(4.0))(v)
        return nx.lax.psum(h.sum(), "i")

    x = torch.randn(8, 4)
    nx.xmap(f, in_axes=[["i", ...]], out_axes=[...])(x).backward()
    want, w.grad = w.grad, None
    with P.Mesh(np.array(devices), ("x",)):
        nx.xmap(f, in_axes=[["i", ...]], out_axes=[...], axis_resources=res)(x).backward()
    torch.testing.assert_close(w.grad, want)
