"""``nx.lax.pdot`` of operands with different dtypes promotes them as JAX's ``dot_general``
does (values from JAX 0.4.30's xmap run side by side); two bool operands are refused."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.arange(6, dtype=torch.int32).reshape(2, 3)
W = torch.arange(12.).reshape(3, 4)
WANT = torch.tensor([[20., 23., 26., 29.], [56., 68., 80., 92.]])   # JAX 0.4.30


def _pdot(x, w):
    return nx.xmap(lambda x, w: nx.lax.pdot(x, w, 'k'), in_axes=(['b', 'k'], ['k', 'h']),
                   out_axes=['b', 'h'])(x, w)


@pytest.mark.parametrize("x", [X, X.to(torch.float16), X.to(torch.int8)])
def test_mixed_dtypes_promote(x):
    out = _pdot(x, W)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, WANT)


def test_mixed_dtypes_gradient():
    g = nx.xmap(lambda x, w: nx.grad(lambda w: nx.lax.pdot(x, w, 'k').sum())(w),
                in_axes=(['b', 'k'], ['k', 'h']), out_axes=['b', 'k', 'h'])(X, W)
    want = X.float()[:, :, None].expand(2, 3, 4)   # JAX 0.4.30
    torch.testing.assert_close(g, want)


def test_bool_operands_refused():
    b = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(nx.NamedAxisError, match="bool"):
        _pdot(b, b.T.contiguous())
