"""Regressions found while leaning named_axes/rules (helper r1)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_new_full_of_plain_tensor_with_named_fill_is_a_named_axes_error():
    # plain.new_full(size, named) reached the new_* rule with a plain self and raised a
    # raw AttributeError ('Tensor' object has no attribute '_data'); the rule now hands
    # it to the vmap fallback, which reports it as a ShapeError.
    n = nx.named(torch.ones(2, 3), {0: "b"})
    with pytest.raises(nx.NamedAxisError):
        torch.zeros(2).new_full((2,), n.sum())
