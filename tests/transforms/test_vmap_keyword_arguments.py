"""nx.vmap takes keyword arguments. torch.func.vmap passes them to every instance
unmapped, jax.vmap maps them over their leading axis: where that makes no difference
(no tensor in them) they pass as torch passes them; a tensor in one is refused with our
error (the references disagree on its meaning). Before, any keyword argument was a raw
Python TypeError ("mapped() got an unexpected keyword argument")."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.arange(3.)


@pytest.mark.parametrize("kw", [{}, {"axis_name": "i"}])
def test_non_tensor_keyword_arguments_pass_to_every_instance(kw):
    f = nx.vmap(lambda x, s=1., shift=(0., 0.): x * s + shift[1], **kw)
    assert torch.equal(f(X, s=2., shift=(0., 1.)), X * 2 + 1)
    g = nx.xmap(lambda r: nx.vmap(lambda c, s=1.: c * s)(r, s=3.), in_axes=["b", ...],
                out_axes=["b", ...])
    assert torch.equal(g(torch.ones(2, 3)), torch.full((2, 3), 3.))


@pytest.mark.parametrize("kw", [{}, {"axis_name": "i"}, {"chunk_size": 1}])
def test_a_tensor_keyword_argument_is_refused(kw):
    # torch.func.vmap(lambda x, s: x * s)(x, s=ones(3)) -> an outer product (s unmapped);
    # jax.vmap(lambda x, s: x * s)(x, s=ones(3)) -> x * s elementwise (s mapped)
    with pytest.raises(nx.AxisTypeError, match=r"keyword argument 's' holds a tensor, which "
                                                r"torch.func.vmap passes unmapped and jax.vmap "
                                                r"maps"):
        nx.vmap(lambda x, s: x * s, **kw)(X, s=torch.ones(3))
    with pytest.raises(nx.AxisTypeError, match="keyword argument 's' holds a tensor"):
        nx.vmap(lambda x, s: x * s[0], **kw)(X, s=[torch.ones(3)])
