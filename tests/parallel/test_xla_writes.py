"""In-place writes inside an xmap on the torch-xla SPMD engine (4 virtual CPU devices)
agree with the vectorized run on CPU: an in-place op with a tensor operand (XLA's
tensors have no address to check overlap against), and a write into an input."""
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


def _both(devices, f, *args):
    """``f`` xmapped over 'i' (vectorized on CPU, then on the XLA mesh), each on its own
    copies of ``args``: (results, inputs after the call) of each."""
    runs = []
    for res in ({}, {"i": "x"}):
        copies = [a.clone() for a in args]
        g = nx.xmap(f, in_axes=[["i", ...]] * len(args), out_axes=["i", ...],
                    axis_resources=res)
        with P.Mesh(np.array(devices), ("x",)):
            runs.append((g(*copies), copies))
    return runs


def test_inplace_op_with_a_tensor_operand(devices):
    def f(v):
        w = v * 1
        w.add_(nx.lax.axis_index("i") * v)   # a named tensor operand
        return w
    (want, _), (got, _) = _both(devices, f, torch.arange(16.0).view(4, 4))
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("res", [{"i": "x"}, {"i": ("x", P.SerialLoop(2))}])
def test_a_write_into_an_input_reaches_the_callers_tensor(devices, res):
    def f(v, u):
        v.mul_(2)          # through the xmap's view of the input
        u[0] = -1.0
        return v + u
    x, y = torch.arange(32.0).view(8, 4), torch.ones(8, 4)
    want = nx.xmap(f, in_axes=[["i", ...], {1: "i"}], out_axes=["i", ...])(x.clone(), y.t().clone())
    a, b = x.clone(), y.t().clone()
    with P.Mesh(np.array(devices), ("x",)):
        got = nx.xmap(f, in_axes=[["i", ...], {1: "i"}], out_axes=["i", ...],
                      axis_resources=res)(a, b)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a, x * 2)
    want_b = y.t().clone()
    want_b[0] = -1.0
    torch.testing.assert_close(b, want_b)


def test_a_write_into_an_input_sharing_memory_with_another_raises(devices):
    def f(u, v):
        u.mul_(2)
        return u + v     # the vectorized run sees the write through v
    a = torch.arange(8.0).view(4, 2)
    g = nx.xmap(f, in_axes=(["i", ...], ["i", ...]), out_axes=["i", ...],
                axis_resources={"i": "x"})
    with P.Mesh(np.array(devices), ("x",)):
        with pytest.raises(nx.AxisResourceError, match="shares memory with another input"):
            g(a, a)
        torch.testing.assert_close(g(a, a.clone()), torch.arange(8.0).view(4, 2) * 3)


def test_out_on_the_host_for_a_named_result_raises_as_vectorized(devices):
    def f(v):
        c = torch.empty(4)
        torch.add(v, 1, out=c)   # a plain out= for a named result
        return c
    for res in ({}, {"i": "x"}):
        g = nx.xmap(f, in_axes=[["i", ...]], out_axes=["i", ...], axis_resources=res)
        with P.Mesh(np.array(devices), ("x",)):
            with pytest.raises(nx.AxisSizeError, match="out= has named shape"):
                g(torch.arange(16.0).view(4, 4))
