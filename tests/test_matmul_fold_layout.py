"""Issue 16: the folded matmul never views a non-contiguous layout.

Under DTensor (2-D mesh) the backward of ``_matmul_folded``'s reshape viewed a shard
whose layout did not allow it ("view size is not compatible with input tensor's size and
stride").  Not reproduced on torch 2.13 CPU/gloo; the reshape used for DTensor operands
(``_CopyReshape``: copy to contiguous, then view, in both directions) is pinned here on
plain tensors with a transposed operand and a transposed gradient.
"""
from __future__ import annotations

import torch

import named_axes as nx
from named_axes.rules.matmul import _CopyReshape, _reshape


def test_copy_reshape_takes_non_contiguous_inputs_and_gradients():
    x = torch.randn(4, 3, 2, dtype=torch.float64).permute(2, 0, 1).requires_grad_()   # [2, 4, 3]
    assert not x.is_contiguous()
    out = _CopyReshape.apply(x, (8, 3))
    torch.testing.assert_close(out, x.reshape(8, 3))
    g = torch.randn(3, 8, dtype=torch.float64).mT     # a transposed gradient
    (gx,) = torch.autograd.grad(out, x, g)
    torch.testing.assert_close(gx, g.reshape(2, 4, 3))


def test_plain_tensors_keep_reshape():
    x = torch.randn(2, 6)
    assert _reshape(x, (3, 4))._base is x     # a view, no copy


def test_folded_matmul_with_non_contiguous_operands_and_gradient():
    # both operands carry names (the folded path), both laid out transposed
    a = torch.randn(3, 2, 4, dtype=torch.float64).permute(1, 0, 2).requires_grad_()  # [b, s, i]
    w = torch.randn(6, 4, 7, dtype=torch.float64).permute(2, 1, 0).requires_grad_()  # [h, i, o]
    assert not a.is_contiguous() and not w.is_contiguous()
    out = nx.named(a, {0: 'b'}) @ nx.named(w, {0: 'h'})
    assert out.named_shape == {'b': 2, 'h': 7} and out.shape == (3, 6)
    res = nx.positional(out, {0: 'b', 1: 'h'})
    ref = torch.einsum('bsi,hio->bhso', a, w)
    torch.testing.assert_close(res, ref)
    g = torch.randn(6, 3, 7, 2, dtype=torch.float64).permute(3, 2, 1, 0)   # transposed gradient
    ga, gw = torch.autograd.grad(res, (a, w), g)
    ra, rw = torch.autograd.grad(ref, (a, w), g)
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gw, rw)
