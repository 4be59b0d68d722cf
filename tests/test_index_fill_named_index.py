"""``index_fill`` with a named (per-instance) index: each instance fills with its own
index, as a Python loop over the named indices does (torch's eager rule: a negative index
counts from the end; one out of range raises).  functorch's batching rule, which the
vmap fallback ran, neither wrapped a negative index nor checked the range, so an index
out of range filled a neighbouring instance."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.arange(24.).reshape(3, 2, 4)


def _fill(dim, method="index_fill"):
    def body(v, t):
        if method == "torch":
            return torch.index_fill(v, dim, t, -1.)
        return getattr(v.clone() if method.endswith("_") else v, method)(dim, t, -1.)
    return nx.xmap(body, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])


@pytest.mark.parametrize("method", ["index_fill", "index_fill_", "torch"])
@pytest.mark.parametrize("dim,index", [(1, [[-1, 0], [1, 1], [-4, 2]]), (0, [[-1, 0], [1, 1], [-2, -2]]),
                                       (-1, [[3, -3], [0, 0], [2, -1]])])
def test_negative_indices_count_from_the_end(method, dim, index):
    s = torch.tensor(index)
    want = torch.stack([v.index_fill(dim, t, -1.) for v, t in zip(X, s)])
    assert torch.equal(_fill(dim, method)(X, s), want)


@pytest.mark.parametrize("method", ["index_fill", "index_fill_"])
@pytest.mark.parametrize("index,bad", [([[0, 1], [1, 1], [4, 2]], 4), ([[0, 1], [-5, 1], [3, 2]], -5)])
def test_out_of_range_index_raises_naming_the_instance(method, index, bad):
    with pytest.raises(nx.NamedAxisError, match=rf"out of range at instance .*holds {bad}"):
        _fill(1, method)(X, torch.tensor(index))


def test_gradient_and_jit():
    s = torch.tensor([-1, 0, 2])
    want = torch.stack([v.index_fill(1, t, -1.) for v, t in zip(X, s)])
    assert torch.equal(nx.jit(_fill(1))(X, s), want)
    g = nx.xmap(lambda v, t: nx.grad(lambda v: (v.index_fill(1, t, -1.) ** 2).sum())(v),
                in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])(X, s)
    assert torch.equal(g, 2 * torch.where(want == -1, 0., X))
