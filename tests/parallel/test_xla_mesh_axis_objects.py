"""A mesh whose axis names are not strings (any hashable, as JAX allows) works on the
torch-xla engine under nx.grad: torch-xla's autograd-aware sharding rebuilds its mesh from
the mesh's text with ``ast.literal_eval``, which failed with a bare AssertionError on a
name with no literal form (an ``object()``, a user's enum)."""
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


class _Axis:
    """A mesh axis name with no literal form."""

    def __repr__(self) -> str:
        return "<model axis>"


@pytest.mark.parametrize("name", [_Axis(), "x"], ids=["object", "str"])
def test_grad_through_an_xla_mesh_whose_axis_is_named_by(devices, name):
    x = torch.arange(12.).reshape(4, 3) / 10
    body = lambda v: nx.lax.psum(v, "i") * v.sin()
    loss = lambda f: (lambda x: (f(x) * torch.arange(3.)).sum())
    xm = lambda res: nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...], axis_resources=res)
    want = nx.grad(loss(xm({})))(x)
    with P.Mesh(np.array(devices), (name,)):
        got = nx.grad(loss(xm({"i": name})))(x)
    torch.testing.assert_close(got.cpu(), want)
