"""Gradients of ``nx.pmap`` over XLA devices (4 virtual CPU devices) equal the vectorized
run's.  torch-xla's autograd-aware sharding rebuilds the mesh from its string form, which
failed (a bare AssertionError from torch-xla) while pmap named its mesh axis by an object."""
from __future__ import annotations

import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402

devices = pytest.fixture(scope="module", name="devices")(_xla_env.four_devices)


@pytest.mark.parametrize("body", [torch.sin, lambda v: nx.lax.psum(v, "i") * v,
                                  lambda v: nx.lax.all_gather(v, "i").sum(0) * v],
                         ids=["sin", "psum", "all_gather"])
def test_grad_of_pmap_over_xla_devices(devices, body):
    x = torch.arange(12.).reshape(4, 3) / 10
    loss = lambda f: (lambda x: (f(x) * torch.arange(3.)).sum())
    want = nx.grad(loss(nx.pmap(body, axis_name="i")))(x)
    got = nx.grad(loss(nx.pmap(body, axis_name="i", devices=devices)))(x)
    torch.testing.assert_close(got.cpu(), want)


def test_a_size_not_divisible_by_the_devices_names_pmap(devices):
    # (it was xmap's message, naming the private mesh axis: "xmap: axis 'i' has size 2,
    # which is not divisible by 4, the size of the mesh axes it is mapped to
    # ('<pmap mesh axis 7>': 4)")
    with pytest.raises(nx.AxisResourceError, match=r"^pmap\(<lambda>\): the mapped axis has "
                                                   r"size 2, which is not divisible by the "
                                                   r"number of devices it is split over \(4\)"):
        nx.pmap(lambda v: v * 2, axis_name="i", devices=devices)(torch.ones(2, 3))
