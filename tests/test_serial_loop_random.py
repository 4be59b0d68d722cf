"""Random ops under SerialLoop draw what the vectorized run draws: a draw lacking the loop
axis is the same in every chunk (it differed per chunk: a value whose named shape said
"replicated" varied along the axis), and a draw along the loop axis is each chunk's part
of the unsplit run's draws (it drew other values)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

L = nx.lax
X = torch.arange(24, dtype=torch.float64).reshape(8, 3)

PROGRAMS = {
    "plain randn": lambda x: x + torch.randn(3, dtype=torch.float64),
    "randn_like": lambda x: torch.randn_like(x),
    "dropout": lambda x: F.dropout(x + 1, 0.5),
    "nn.Dropout and a plain rand": lambda x: torch.nn.Dropout(0.3)(x + 1) * torch.rand(()),
    "bernoulli": lambda x: torch.bernoulli(x / 30),
    "pmax of a plain draw": lambda x: L.pmax(x * 0 + torch.rand(3, dtype=torch.float64), "i")
    + torch.rand_like(x),
    # a layout in memory other than the logical one (the draws fill memory in order)
    "dropout of a transpose": lambda x: F.dropout((x[:, None] * x).T, 0.5).sum(0),
    "rand_like in nx.vmap": lambda x: nx.vmap(torch.rand_like, randomness="different")(x),
    # random inside a function the vmap fallback runs (its own draws unseen): each chunk
    # drew the same noise
    "gumbel_softmax": lambda x: F.gumbel_softmax(x, tau=0.5),
    # an op not named a random op that draws (a kernel's own dropout)
    "sdpa with dropout": lambda x: F.scaled_dot_product_attention(
        x[:, None], x[:, None], x[:, None], dropout_p=0.5),
}


def _run(fn, resources, x=X, axes=("i", ...)):
    torch.manual_seed(3)
    f = nx.xmap(fn, in_axes=list(axes), out_axes=list(axes), axis_resources=resources)
    return f(x), torch.rand(())   # (and the random state after the call)


@pytest.mark.parametrize("chunks", [1, 2, 8])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_random_ops_under_serial_loop_draw_the_vectorized_values(name, chunks):
    want, after = _run(PROGRAMS[name], {})
    got, got_after = _run(PROGRAMS[name], {"i": nx.SerialLoop(chunks)})
    assert torch.equal(got, want)
    assert torch.equal(got_after, after)


def test_two_loop_axes_and_the_gradient_after_the_call():
    y = torch.randn(4, 6, 5, dtype=torch.float64)
    fn = lambda v: F.dropout(v.sin(), 0.5) * L.axis_index("j")   # noqa: E731
    want, _ = _run(fn, {}, y, ("i", "j", ...))
    got, _ = _run(fn, {"i": nx.SerialLoop(2), "j": nx.SerialLoop(3)}, y, ("i", "j", ...))
    assert torch.equal(got, want)
    grads = []
    for res in ({}, {"i": nx.SerialLoop(4)}):
        x = X.clone().requires_grad_()
        out, _ = _run(lambda v: F.dropout(v.sin(), 0.5), res, x)
        grads.append(torch.autograd.grad(out.sum(), x)[0])
    assert torch.equal(grads[0], grads[1])


def test_an_in_place_draw_along_a_loop_axis_is_refused():
    with pytest.raises(nx.AxisResourceError, match=r"Tensor.normal_.*in place.*\('i',\)"):
        _run(lambda v: v.clone().normal_(), {"i": nx.SerialLoop(2)})
    # (vectorized, and along an axis the loop does not split, it runs)
    _run(lambda v: v.clone().normal_(), {})
