"""Nested xmaps: an inner xmap cannot shadow an axis an enclosing one binds, as in JAX."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_nested_axis_sizes_cannot_shadow_an_enclosing_axis():
    # JAX 0.4.30: "Detected disallowed xmap axis name shadowing"; the inner 'k' (size 5)
    # silently replaced the outer one (size 3)
    inner = nx.xmap(lambda y: nx.lax.axis_index('k') * 1.0, in_axes=[...],
                    out_axes=['k', ...], axis_sizes={'k': 5})
    outer = nx.xmap(lambda x: inner(x).sum() + x, in_axes=['k', ...], out_axes=['k', ...])
    with pytest.raises(nx.AxisSpecError, match="'k' is already bound"):
        outer(torch.ones(3, 2))
