"""SerialLoop over the torch-xla engine (``{'i': ('x', SerialLoop(2))}``) writes what the
body writes in place as the vectorized run does: a tensor the body closes over (a
counter, a buffer, ``out=``) or an input lacking the loop axis once, not once per chunk;
a write through a view of an input or of an XLA tensor made inside the body kept in
every chunk (the first chunk's was lost while SerialLoop watched it with a dispatch mode:
an XLA tensor made under one lacks torch-xla's functional wrapper, its views copies)."""
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
RESOURCES = [{"i": "x"}, {"i": ("x", P.SerialLoop(2))}, {"i": ("x", P.SerialLoop(4))}]


def _runs(devices, res, make, f, in_axes):
    """``f(state, *args)`` xmapped over 'i', vectorized and with ``res``, each on its own
    ``make()`` state: [(result, state after the call)] of each."""
    out = []
    for r in ({}, res):
        state = make()
        g = nx.xmap(lambda *a: f(state, *a), in_axes=in_axes, out_axes=["i", ...],
                    axis_resources=r)
        with P.Mesh(np.array(devices), ("x",)):
            out.append((g(*state["args"]), state))
    return out


def _agree(runs, *names):
    (want, ws), (got, gs) = runs
    torch.testing.assert_close(got, want)
    for n in names:
        torch.testing.assert_close(gs[n], ws[n])


X = torch.arange(32.0).view(16, 2)


@pytest.mark.parametrize("res", RESOURCES)
def test_a_closed_over_counter_is_advanced_once(devices, res):
    runs = _runs(devices, res, lambda: {"acc": torch.zeros(()), "args": [X.clone()]},
                 lambda s, v: v + s["acc"].add_(1), [["i", ...]])
    _agree(runs, "acc")
    assert float(runs[1][1]["acc"]) == 1.0


@pytest.mark.parametrize("res", RESOURCES)
def test_a_closed_over_buffer_accumulates_a_psum_once(devices, res):
    def f(s, v):
        s["buf"] += nx.lax.psum(v, "i")
        torch.add(s["total"], nx.lax.psum(v, "i"), out=s["total"])
        return v * s["buf"]
    make = lambda: {"buf": torch.ones(2), "total": torch.ones(2), "args": [X.clone()]}  # noqa: E731
    _agree(_runs(devices, res, make, f, [["i", ...]]), "buf", "total")


@pytest.mark.parametrize("res", RESOURCES)
def test_an_input_lacking_the_loop_axis_written_in_place_once(devices, res):
    def f(s, v, u):
        u.add_(1)
        u[0] = u[0] * 3
        return v + u
    make = lambda: {"args": [X.clone(), torch.ones(2)]}  # noqa: E731
    runs = _runs(devices, res, make, f, [["i", ...], [...]])
    torch.testing.assert_close(runs[1][0], runs[0][0])
    torch.testing.assert_close(runs[1][1]["args"][1], runs[0][1]["args"][1])


@pytest.mark.parametrize("res", RESOURCES)
def test_writes_through_views_of_inputs_and_made_tensors_kept_in_every_chunk(devices, res):
    def f(s, v, u):
        u[0] = -1.0                                   # through a view of an input
        z = torch.zeros(2, device=v.device)           # an XLA factory's tensor
        z[1] = 5.0
        w = torch.ones(2).to(v.device)                # a CPU tensor moved onto XLA
        w[0] = 2.0
        return v * w + z + u.sum()
    make = lambda: {"args": [X.clone(), torch.ones(3, 16)]}  # noqa: E731
    runs = _runs(devices, res, make, f, [["i", ...], {1: "i"}])
    torch.testing.assert_close(runs[1][0], runs[0][0])
    torch.testing.assert_close(runs[1][1]["args"][1], runs[0][1]["args"][1])


def test_an_einsum_over_a_mesh_axis_and_a_loop_axis(devices):
    """The oracle's p0_00011: the first loop chunk came out wrong (by 4.9) while watched."""
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(3, 4, 2, generator=g), torch.randn(2, 3, 4, 2, generator=g),
            torch.randn(2, 2, 3, generator=g))
    spec = dict(in_axes=((["a", "c", "d"], [None, "a", "c", ...]), [None, None, "a", ...]),
                out_axes=["a", ...])

    def body(xy, z):
        return nx.einsum("{d,c,a},pn{c,a},pn{a}->p{a}", xy[0], xy[1], z)
    want = nx.xmap(body, **spec)((args[0], args[1]), args[2])
    for res in ({"d": "x", "a": P.SerialLoop(3)}, {"c": "x", "d": P.SerialLoop(2)}):
        with P.Mesh(np.array(devices).reshape(2, 2), ("x", "y")):
            got = nx.xmap(body, **spec, axis_resources=res)((args[0], args[1]), args[2])
        torch.testing.assert_close(got, want)
