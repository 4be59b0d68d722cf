"""pmax/pmin over an empty positional axis: an AxisSizeError, as over an empty named axis."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("op", ["pmax", "pmin"])
def test_extreme_over_an_empty_positional_axis_is_an_axis_size_error(op):
    # was torch's raw IndexError from amax / amin; the named path already says AxisSizeError
    with pytest.raises(nx.AxisSizeError, match=rf"{op}\(x, 0\): a positional axis of size 0"):
        getattr(nx.lax, op)(torch.ones(0, 2), 0)
    x = nx.named(torch.ones(3, 0), 'i ...')
    with pytest.raises(nx.AxisSizeError, match="positional axis of size 0"):
        getattr(nx.lax, op)(x, ('i', 0))
