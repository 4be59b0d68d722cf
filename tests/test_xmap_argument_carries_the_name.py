"""An xmap whose in_axes name an axis that an argument already carries (made with
nx.named outside any named program) says so; before, it said the axis was 'already bound
by an enclosing xmap/vmap', where there was none. The nested case keeps that message."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_the_argument_is_named_as_carrying_the_axis():
    x = nx.named(torch.zeros(2, 3, 4), ["i", ...])
    f = nx.xmap(lambda a: a, in_axes=(["i", ...],), out_axes=["i", ...])
    for _ in range(2):
        with pytest.raises(nx.AxisSpecError, match=r"argument 0 already has a named axis 'i' "
                                                    r"\(made outside this xmap\)"):
            f(x)


def test_an_enclosing_binding_keeps_its_message():
    inner = nx.xmap(lambda u: u, in_axes=["i", ...], out_axes=["i", ...])
    f = nx.xmap(lambda v: inner(v), in_axes=["i", ...], out_axes=["i", ...])
    with pytest.raises(nx.AxisSpecError, match="axis 'i' is already bound by an enclosing"):
        f(torch.zeros(2, 2))
