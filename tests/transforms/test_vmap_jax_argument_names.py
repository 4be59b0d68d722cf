"""nx.vmap takes JAX's names in_axes / out_axes for torch's in_dims / out_dims (SPEC §4:
torch.func's signature plus JAX's extras). Ported JAX code such as
vmap(f, in_axes=(0, None)) raised a raw Python TypeError (unexpected keyword argument
'in_axes'). Values as JAX 0.4.30 gives them."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

Y = torch.arange(24.).reshape(2, 3, 4)


@pytest.mark.parametrize("kw", [{}, {"axis_name": "v"}])
def test_in_axes_and_out_axes(kw):
    # vmap(lambda r, s: r * s, in_axes=(0, None))(y, arange(4.)) -> y * arange(4.)
    out = nx.vmap(lambda r, s: r * s, in_axes=(0, None), **kw)(Y, torch.arange(4.))
    assert torch.equal(out, Y * torch.arange(4.))
    # vmap(lambda r: r * 2, in_axes=1, out_axes=1)(y) -> y * 2
    assert torch.equal(nx.vmap(lambda r: r * 2, in_axes=1, out_axes=1, **kw)(Y), Y * 2)
    # inside xmap (the named path without an axis name)
    f = nx.xmap(lambda a: nx.vmap(lambda r: r * 2, in_axes=1, out_axes=1)(a),
                in_axes=["i", ...], out_axes=["i", ...])
    assert torch.equal(f(Y), Y * 2)


def test_both_names_at_once_is_refused():
    with pytest.raises(nx.AxisTypeError, match=r"in_dims/in_axes are one argument"):
        nx.vmap(lambda r: r, in_dims=1, in_axes=1)
    with pytest.raises(nx.AxisTypeError, match=r"out_dims/out_axes are one argument"):
        nx.vmap(lambda r: r, out_dims=(0,), out_axes=1)
