"""A NamedTensor's queries and layouts under SerialLoop and torch.func: the whole axis, never
a chunk's share (each failed before its fix)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes.parallel import SerialLoop

X = torch.arange(8.).reshape(4, 2)


def _run(fn, chunks):
    kw = {} if chunks is None else {"axis_resources": {"i": SerialLoop(chunks)}}
    return nx.xmap(fn, in_axes=["i", ...], out_axes=[...], **kw)(X)


@pytest.mark.parametrize("chunks", [None, 2])
def test_size_of_a_named_axis_is_its_size_not_a_serial_loop_chunks(chunks):
    # x.size('i') read the physical tensor: a SerialLoop chunk's 2 of the 4 entries,
    # while x.named_shape['i'] said 4 (a value that depended on axis_resources)
    out = _run(lambda x: torch.ones(()) * x.size("i") + 10 * x.named_shape["i"], chunks)
    assert out.item() == 44.0


def test_align_to_a_serial_loop_axis_raises_as_positional_does():
    # x.align_to('i', ...) placed only the chunk's share of a SerialLoop axis (a shape
    # that depended on axis_resources, silently); nx.positional refused it
    assert _run(lambda x: torch.ones(()) * x.align_to("i", ...).shape[0], None).item() == 4.0
    with pytest.raises(nx.AxisResourceError, match="Tensor.align_to over axis 'i'"):
        _run(lambda x: torch.ones(()) * x.align_to("i", ...).shape[0], 2)
    with pytest.raises(nx.AxisResourceError, match="positional\\(\\) over axis 'i'"):
        _run(lambda x: torch.ones(()) * nx.positional(x, ["i", ...]).shape[0], 2)
    # an axis left named may stay a chunk's share
    out = _run(lambda x: nx.lax.psum(x.align_to(...), "i").sum(), 2)
    assert out.item() == X.sum().item()


def test_repr_under_torch_func_shows_no_mangled_values():
    # the repr of a functorch-wrapped tensor ("GradTrackingTensor(lvl=1, value=...") was
    # cut as if it were "tensor(...", printing fragments of it as the values
    from named_axes._tensor import NamedTensor

    seen = []

    def f(t):
        seen.append(repr(NamedTensor._wrap(t.unsqueeze(0), ("a",))))
        return t.sum()

    torch.func.grad(f)(torch.ones(2))
    torch.func.vmap(f)(torch.ones(3, 2))
    assert all("Tensor(lvl" not in s and "values laid out" not in s for s in seen), seen
