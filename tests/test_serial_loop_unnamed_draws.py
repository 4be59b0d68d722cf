"""Ops that draw random numbers without bearing a random op's name -- a bound function or
an aten op whose kernel draws (sdpa's dropout, by the function, the aten packet and the
overload), Python code that draws inside (nn.MultiheadAttention's dropout) -- draw under
SerialLoop what the vectorized run draws, like the named random ops
(tests/test_serial_loop_random.py): the dispatcher watches torch's random state around
every op that may draw, which it tells by torch's tags."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

X = torch.arange(24, dtype=torch.float64).reshape(8, 3) / 10
_MHA = torch.nn.MultiheadAttention(3, 1, dropout=0.5, dtype=torch.float64)
_SDPA = torch.ops.aten.scaled_dot_product_attention

PROGRAMS = {
    "F.scaled_dot_product_attention": lambda x: F.scaled_dot_product_attention(
        x[:, None], x[:, None], x[:, None], dropout_p=0.5),
    "aten packet": lambda x: _SDPA(x[:, None], x[:, None], x[:, None], dropout_p=0.5),
    "aten overload": lambda x: _SDPA.default(x[:, None], x[:, None], x[:, None], None, 0.5),
    "native_dropout overload": lambda x: torch.ops.aten.native_dropout.default(x, 0.5, True)[0],
    "nn.MultiheadAttention": lambda x: _MHA(*[x[:, None] * x] * 3, need_weights=False)[0],
    # after ops that cannot draw (their random state not watched)
    "arithmetic then dropout": lambda x: F.scaled_dot_product_attention(
        *[(x ** 2 - x / 3).exp()[:, None]] * 3, dropout_p=0.5) * x.mean(),
}


def _run(fn, resources):
    torch.manual_seed(3)
    f = nx.xmap(fn, in_axes=["i", ...], out_axes=["i", ...], axis_resources=resources)
    return f(X), torch.rand(())   # (and the random state after the call)


@pytest.mark.parametrize("chunks", [2, 8])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_unnamed_draws_under_serial_loop_draw_the_vectorized_values(name, chunks):
    want, after = _run(PROGRAMS[name], {})
    got, got_after = _run(PROGRAMS[name], {"i": nx.SerialLoop(chunks)})
    assert torch.equal(got, want)
    assert torch.equal(got_after, after)
