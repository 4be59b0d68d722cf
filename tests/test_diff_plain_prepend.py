"""``torch.diff`` of a named value with a plain ``prepend`` / ``append`` (each instance
prepends the same tensor, of the input's positional rank) equals the loop over the named
indices.  The dim-wise rule used to pass the plain tensor to torch beside the physical
tensor, whose rank is larger by the named dims: a ShapeError ("diff expects prepend or
append to be the same dimension as input") for a call each instance makes.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

X = torch.randn(2, 3, 3)


@pytest.mark.parametrize("call, p", [
    (lambda x, p: x.diff(dim=-1, prepend=p), torch.randn(3, 1)),
    (lambda x, p: torch.diff(x, 2, 0, append=p), torch.randn(2, 3)),
    (lambda x, p: torch.diff(x, 1, 0, p, p), torch.randn(2, 3)),
], ids=["prepend", "append", "both"])
def test_diff_with_a_plain_prepend_or_append_matches_the_loop(call, p):
    got = call(nx.named(X, 'N ...'), p)
    assert got.named_shape == {'N': 2}
    assert torch.equal(nx.positional(got, 'N ...'), torch.stack([call(row, p) for row in X]))


def test_diff_with_a_prepend_of_another_rank_is_torchs_error():
    with pytest.raises(nx.ShapeError, match="same dimension as input"):
        nx.named(X, 'N ...').diff(prepend=torch.randn(2))
