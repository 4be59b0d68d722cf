"""Random draws on the torch-xla engine do not depend on the resources: with the same
seeds, the vectorized run, the mesh, the mesh beside a SerialLoop and a SerialLoop alone
draw the same values (up to float rounding), and leave the generators alike.  Inputs on
the CPU draw from the CPU generator, as the vectorized run on them does (the engine draws
a random op on host copies of its XLA values); inputs on XLA draw from XLA's generator,
which a SerialLoop restores for each chunk as it restores the CPU one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import torch_xla.core.xla_model as xm  # noqa: E402

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402
from named_axes.parallel._xla import xla_device  # noqa: E402


devices = pytest.fixture(scope="module", name="devices")(_xla_env.four_devices)
RESOURCES = [{"i": "x"}, {"i": ("x", P.SerialLoop(2))}, {"i": P.SerialLoop(2)}]


def _uniform_in_place(v):
    z = torch.zeros(3, device=v.device)   # (in place into a value split along 'i': refused)
    z.uniform_()
    return v + z


def _sdpa_dropout(v):
    q = v.unsqueeze(-1)   # (an op not named a random op that draws: sdpa's dropout_p)
    return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5).squeeze(-1)


BODIES = {
    "rand_like": lambda v: v + torch.rand_like(v),
    "dropout": lambda v: torch.nn.functional.dropout(v, 0.5),
    "unnamed_randn": lambda v: v + torch.randn(3, device=v.device),
    "uniform_": _uniform_in_place,
    "bernoulli": lambda v: torch.bernoulli(torch.sigmoid(v)),
    "sdpa_dropout": _sdpa_dropout,
}


def _run(devices, body, res, home):
    """Two calls of ``body`` xmapped over 'i' with ``res`` from fixed seeds (the second
    shows the generators were left alike), and the input's gradient."""
    x = torch.linspace(-1, 1, 24).view(8, 3)
    x = (x.to(xla_device()) if home == "xla" else x).requires_grad_()
    torch.manual_seed(0)
    xm.set_rng_state(0)
    f = nx.xmap(body, in_axes=[["i", ...]], out_axes=["i", ...], axis_resources=res)
    with P.Mesh(np.array(devices), ("x",)):
        a, b = f(x), f(x)
    (grad,) = torch.autograd.grad((a * torch.arange(3.0, device=a.device)).sum() + b.sum(), x)
    return [t.detach().cpu() for t in (a, b, grad)]


@pytest.mark.parametrize("home", ["cpu", "xla"])
@pytest.mark.parametrize("body", sorted(BODIES))
def test_same_seed_same_draws_under_every_assignment(devices, body, home):
    fun = BODIES[body]
    want = _run(devices, fun, {}, home)
    assert not torch.equal(want[0], want[1])   # (the second call drew other numbers)
    for res in RESOURCES:
        got = _run(devices, fun, res, home)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, msg=lambda m: f"{res}: {m}")


def test_dropout_in_a_checkpoint_recomputes_the_forwards_mask(devices):
    """The recomputation of a checkpoint draws on the host as the forward did."""
    w = torch.nn.Parameter(torch.linspace(-1, 1, 12).view(3, 4))

    def f(v):
        h = nx.checkpoint(lambda u: torch.nn.functional.dropout(torch.sin(u @ w), 0.5))(v)
        return nx.lax.psum(h.pow(2).sum(), "i")

    grads = []
    for res in ({}, {"i": "x"}, {"i": ("x", P.SerialLoop(2))}):
        torch.manual_seed(0)
        with P.Mesh(np.array(devices), ("x",)):
            nx.xmap(f, in_axes=[["i", ...]], out_axes=[...], axis_resources=res)(
                torch.linspace(0, 1, 24).view(8, 3)).backward()
        grads.append(w.grad)
        w.grad = None
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0])
