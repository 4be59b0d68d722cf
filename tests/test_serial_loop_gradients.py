"""Regressions found auditing code that autograd runs after an xmap call returned.

``nx.checkpoint`` inside an xmap whose axis is mapped to ``SerialLoop``: the
recomputation ran in the serial engine's state as the last chunk left it, so an
``axis_index`` recomputed there gave the last chunk's indices (a silently wrong
gradient for every other chunk), and a loop collective recomputed there stopped the
backward with the engine's internal pause.  The recomputation now re-enters the chunk
(and the collective's place in it) of the call it recomputes.  A custom rule's backward
asking for a SerialLoop axis's index or collective is refused (its chunks are gone).
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes.parallel._serial import SerialLoopError

L = nx.lax

_BODIES = {
    "axis_index": lambda x, w: nx.checkpoint(
        lambda a, b: (a * b * L.axis_index("i")).sin())(x, w),
    "psum": lambda x, w: nx.checkpoint(
        lambda a, b: (L.psum(a * b, "i") * a).sin())(x, w),
    "pmean_twice": lambda x, w: nx.checkpoint(
        lambda a, b: L.pmean((a * b).sin(), "i") * L.pmax(a * b, "i") * a)(x, w),
}


def _grads(body, resources):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64, generator=g).requires_grad_()
    w = torch.randn(3, dtype=torch.float64, generator=g).requires_grad_()
    kw = {"axis_resources": resources} if resources else {}
    f = nx.xmap(lambda a, b: L.psum(body(a, b).sum(), "i"), in_axes=(["i", ...], [...]),
                out_axes=[...], **kw)
    out = f(x, w)
    return (out.detach(), *torch.autograd.grad(out, (x, w)))


# the collectives a serial loop combines, without a checkpoint
_PLAIN = {
    "psum": lambda x, w: L.psum(x * w, "i") * x,
    "pmean": lambda x, w: L.pmean((x * w).sin(), "i") * x,
    "pmax": lambda x, w: L.pmax(x * w, "i") * x,
    "pmin": lambda x, w: L.pmin(x * w, "i") * x,
    "pdot": lambda x, w: L.pdot(x * w, x, "i") * w,
    "axis_index": lambda x, w: (x * w) ** 2 * L.axis_index("i"),
}


@pytest.mark.parametrize("name", sorted(_PLAIN))
def test_serial_gradient_after_the_call(name):
    """The gradient through a loop collective, taken after the call returned, equals the
    vectorized run's."""
    want = _grads(_PLAIN[name], None)
    got = _grads(_PLAIN[name], {"i": nx.SerialLoop(2)})
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", sorted(_BODIES))
def test_checkpoint_recomputes_in_its_serial_chunk(name):
    """The gradient through a checkpoint on a SerialLoop axis, taken after the call
    returned, equals the vectorized run's."""
    want = _grads(_BODIES[name], None)
    got = _grads(_BODIES[name], {"i": nx.SerialLoop(2)})
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@nx.custom_vjp
def _indexed_back(x):
    return x * 1.0


_indexed_back.defvjp(lambda x: (x * 1.0, None), lambda _, g: (g * L.axis_index("i"),))


@nx.custom_vjp
def _summed_back(x):
    return x * 1.0


_summed_back.defvjp(lambda x: (x * 1.0, None), lambda _, g: (g * L.psum(g, "i"),))


@pytest.mark.parametrize("rule", [_indexed_back, _summed_back], ids=["axis_index", "psum"])
def test_custom_rule_backward_over_a_serial_loop_axis_is_refused(rule):
    """A custom rule's backward, run by autograd after the call returned, that asks for a
    SerialLoop axis's index or collective is refused: the chunks are gone (the index was
    the last chunk's, a silently wrong gradient; a psum escaped as the engine's pause)."""
    x = torch.randn(4, 3, requires_grad=True)
    out = nx.xmap(lambda a: rule(a).sin(), in_axes=["i", ...], out_axes=["i", ...],
                  axis_resources={"i": nx.SerialLoop(2)})(x)
    with pytest.raises(SerialLoopError, match="after the xmap call returned"):
        torch.autograd.grad(out.sum(), x)
