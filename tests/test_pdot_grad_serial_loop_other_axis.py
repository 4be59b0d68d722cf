"""A gradient taken inside the xmap through ``nx.lax.pdot`` over ``'i'``, with another
axis (``'j'``) mapped to a SerialLoop, equals the vectorized run (which agrees with JAX
0.4.30): the engine's chunk-local product (``nx.lax.pdot`` again) and the engine path
around it both applied JAX's transpose scaling, a gradient ``1/|i|`` of the true one."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.arange(144.).reshape(6, 3, 2, 4) / 17


@pytest.mark.parametrize("f", [
    lambda x: nx.grad(lambda x: torch.sin(nx.lax.pdot(x, x, 'i')).sum())(x),
    lambda x: nx.grad(lambda x: torch.sin(nx.lax.pdot(x, 2 * x + 1, 'i',
                                                       pos_contract=((0,), (0,)))).sum())(x),
    lambda x: nx.grad(lambda x: torch.sin(nx.lax.pdot(x, 2 * x, ('i', 'k'))).sum())(x),
])
@pytest.mark.parametrize("chunks", [1, 3])
def test_serial_loop_on_another_axis_keeps_the_gradient(f, chunks):
    want = nx.xmap(f, in_axes=['i', 'j', 'k', ...], out_axes=['i', 'j', 'k', ...])(X)
    got = nx.xmap(f, in_axes=['i', 'j', 'k', ...], out_axes=['i', 'j', 'k', ...],
                  axis_resources={'j': nx.SerialLoop(chunks)})(X)
    torch.testing.assert_close(got, want)
