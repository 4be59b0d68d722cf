"""``out=`` a named value made outside the xmap body, carrying a SerialLoop axis: inside a
chunk the result holds part of the axis, out= the whole of it (their named shapes agree:
a chunk reports the axis's full size), so torch's copy failed with a bare RuntimeError
("The size of tensor a (4) must match ...").  It is our AxisSizeError."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _run(res):
    buf = nx.named(torch.zeros(4, 3), "i ...")
    f = nx.xmap(lambda x: torch.mul(x, 2, out=buf) + 0, in_axes=["i", ...],
                out_axes=["i", ...], **res)
    return f(torch.ones(4, 3))


def test_out_made_outside_a_serial_loop_chunk_is_refused_clearly():
    assert _run({}).tolist() == [[2.0] * 3] * 4
    with pytest.raises(nx.AxisSizeError, match=r"torch.mul: out= holds 4 entries of axis 'i' "
                       r"but the result holds 2 of them here.*make out= inside the body"):
        _run({"axis_resources": {"i": nx.SerialLoop(2)}})
