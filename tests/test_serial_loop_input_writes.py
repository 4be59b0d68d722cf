"""An input written in place under SerialLoop: once, as the vectorized run writes it.  A
write before a collective over the loop axis was replayed with the chunk (x.add_(1)
then psum: the input grew by 2 and the result was wrong, silently); it is refused."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = nx.lax


def _run(body, chunks):
    x = torch.arange(4.0)
    res = {} if chunks is None else {"axis_resources": {"i": nx.SerialLoop(chunks)}}
    out = nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...], **res)(x)
    return out.tolist(), x.tolist()


def _write_then_psum(x):
    x.add_(1)
    return L.psum(x, "i") * x


def test_a_write_before_a_loop_collective_is_refused():
    assert _run(_write_then_psum, None) == ([10.0, 20.0, 30.0, 40.0], [1.0, 2.0, 3.0, 4.0])
    assert _run(_write_then_psum, 1) == _run(_write_then_psum, None)   # (no replay)
    with pytest.raises(nx.AxisResourceError, match=r"input written in place before a "
                       r"collective over the SerialLoop axes \('i',\).*x\.clone\(\)"):
        _run(_write_then_psum, 2)


@pytest.mark.parametrize("chunks", [2, 4])
def test_writes_that_are_not_replayed_stay_exact(chunks):
    after = lambda x: L.psum(x, "i") + x.mul_(2)   # noqa: E731  (after the last collective)
    alone = lambda x: x.mul_(2) + 1                # noqa: E731  (no collective: one pass)
    copy = lambda x: L.psum(x.clone().add_(1), "i") * x   # noqa: E731
    for body in (after, alone, copy):
        assert _run(body, chunks) == _run(body, None)
