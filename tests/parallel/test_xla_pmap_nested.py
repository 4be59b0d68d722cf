"""A pmap inside a program already split over the XLA devices (an enclosing pmap, or an
xmap on a mesh; 4 virtual CPU devices) runs vectorized within it and gives the vectorized
values.  It used to open a second mesh over the same devices, and torch-xla refused to
re-annotate the values the engine had placed ('Existing annotation must be cleared first')."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _xla_env  # noqa: F401  (sets PJRT/XLA_FLAGS before torch-xla starts)

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla")

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402

L = nx.lax
devices = pytest.fixture(scope="module", name="devices")(_xla_env.four_devices)


def test_pmap_of_pmap(devices):
    x = torch.arange(48.).reshape(4, 4, 3)
    f = lambda v: L.psum(L.psum(v, 'i'), 'j') + L.axis_index('i') * 10 + L.axis_index('j')
    want = nx.pmap(nx.pmap(f, 'i'), 'j')(x)
    got = nx.pmap(nx.pmap(f, 'i', backend='xla'), 'j', devices=devices)(x)
    torch.testing.assert_close(got.cpu(), want.cpu())


def test_pmap_inside_an_xmap_on_a_mesh(devices):
    x = torch.arange(48.).reshape(4, 4, 3)
    g = lambda v: nx.pmap(lambda y: L.psum(y, 'i') + L.psum(y, 'b'), 'i', backend='xla')(v)
    want = nx.xmap(g, in_axes=['b', ...], out_axes=['b', ...])(x)
    with P.Mesh(np.array(devices), ('m',)):
        got = nx.xmap(g, in_axes=['b', ...], out_axes=['b', ...], axis_resources={'b': 'm'})(x)
    torch.testing.assert_close(got.cpu(), want.cpu())
