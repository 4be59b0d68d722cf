"""``F.embedding`` with a named (per-instance) weight and an index out of range raises a
NamedAxisError naming the instance, as torch's eager embedding raises per instance;
functorch's batching rule, which the vmap fallback ran, offset the index into the
instances' stacked rows unchecked and read another instance's row."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

W = torch.arange(12.).reshape(3, 4, 1)


def _emb(index_axes):
    return nx.xmap(lambda w, s: F.embedding(s, w), in_axes=(['i', ...], index_axes),
                   out_axes=['i', ...])


def test_in_range_per_instance():
    s = torch.tensor([[3], [1], [0]])
    assert _emb(['i', ...])(W, s).flatten().tolist() == [3., 5., 8.]


@pytest.mark.parametrize("bad", [4, -1])
def test_named_index_out_of_range_raises(bad):
    with pytest.raises(nx.NamedAxisError, match=rf"instance \{{'i': 1\}}.*holds {bad}"):
        _emb(['i', ...])(W, torch.tensor([[3], [bad], [0]]))


@pytest.mark.parametrize("bad", [4, -1])
def test_plain_index_out_of_range_raises_after_a_valid_call(bad):
    f = _emb([...])
    assert f(W, torch.tensor([3, 1])).flatten().tolist() == [3., 1., 7., 5., 11., 9.]
    with pytest.raises(nx.NamedAxisError, match=rf"holds {bad}"):
        f(W, torch.tensor([0, bad]))
