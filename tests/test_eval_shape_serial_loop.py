"""nx.eval_shape of an xmap whose axes are mapped to a SerialLoop gives the shapes of the
eager run (as JAX 0.4.30's eval_shape under serial_loop does): resources change no shape.
It used to raise the "SerialLoop axis inside nx.jit / make_fx" error."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes import lax


def _struct(out):
    return (tuple(out.shape), out.dtype, dict(getattr(out, "named_shape", {})))


@pytest.mark.parametrize("body,out_axes", [
    (lambda x: x.sum(0), ['a', ...]),
    (lambda x: lax.psum(x, 'a') * 2, [...]),
    (lambda x: nx.grad(lambda y: (y * lax.axis_index('a')).sum())(x), ['a', ...]),
])
def test_eval_shape_with_a_serial_loop_matches_the_run(body, out_axes):
    f = nx.xmap(body, in_axes=['a', ...], out_axes=out_axes,
                axis_resources={'a': nx.SerialLoop(3)})
    x = torch.randn(6, 4, 5)
    s = nx.eval_shape(f, x)
    assert (s.shape, s.dtype, s.named_shape) == _struct(f(x))


def test_eval_shape_with_a_serial_loop_still_checks_the_resources():
    f = nx.xmap(lambda x: x, in_axes=['a', ...], out_axes=['a', ...],
                axis_resources={'a': nx.SerialLoop(4)})
    with pytest.raises(nx.AxisResourceError):
        f(torch.ones(6, 2))
    with pytest.raises(nx.AxisResourceError):
        nx.eval_shape(f, torch.ones(6, 2))
