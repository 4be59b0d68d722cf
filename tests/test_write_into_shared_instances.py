"""A write into a named value whose instances share memory (its named dim of stride 0 from
``expand``, overlapping ``as_strided`` windows) is refused with our error, as torch
refuses a write where "more than one element of the written-to tensor refers to a
single memory location".  ``fill_``, ``zero_``, ``index_put_``, ``masked_fill_``,
``scatter_`` and boolean index assignment wrote every instance into the one memory
silently; ``out=`` raised torch's bare RuntimeError."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

V = nx.named(torch.arange(12.0).reshape(4, 3), "i ...")

WRITES = {
    "fill_": lambda x: x.fill_(1.0),
    "zero_": lambda x: x.zero_(),
    "add_": lambda x: x.add_(V),
    "iadd": lambda x: x.__iadd__(1),
    "index_put_": lambda x: x.index_put_((torch.tensor([0]),), torch.tensor(5.0)),
    "masked_fill_": lambda x: x.masked_fill_(torch.tensor([True, False, True]), 3.0),
    "scatter_": lambda x: x.scatter_(0, torch.tensor([0]), 7.0),
    "setitem_bool": lambda x: x.__setitem__(torch.tensor([True, False, True]), 2.0),
    "setitem": lambda x: x.__setitem__((..., 0), 5.0),
    "out=add": lambda x: torch.add(V, 1, out=x),
    "out=sum": lambda x: torch.sum(V[..., None], -1, out=x),
}


@pytest.mark.filterwarnings("ignore:Use of")
@pytest.mark.parametrize("layout", ["expand", "windows"])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_into_instances_sharing_memory_is_refused(name, layout):
    base = torch.zeros(3) if layout == "expand" else torch.zeros(6)
    x = base.expand(4, 3) if layout == "expand" else base.as_strided((4, 3), (1, 1))
    with pytest.raises(nx.AxisSizeError, match=r"instances of its named axes that share "
                       r"memory.*single memory location.*clone\(\)"):
        WRITES[name](nx.named(x, "i ..."))
    assert not base.any()   # nothing written


def test_values_whose_instances_are_apart_are_written():
    for base, data in ((b, f(b)) for b, f in (
            (torch.zeros(3, 4), lambda b: b.t()), (torch.zeros(4, 6), lambda b: b[:, ::2]),
            (torch.zeros(4, 1), lambda b: b.expand(4, 3)[:, :1]),
            (torch.zeros(2, 4, 3), lambda b: b.permute(1, 2, 0)))):
        nx.named(data, "i ...").add_(1)
        assert data.eq(1).all() and base.sum() == data.numel()


def test_inside_xmap():
    f = nx.xmap(lambda x: nx.named(torch.zeros(3).expand(4, 3), "i ...").copy_(x),
                in_axes=["i", ...], out_axes=["i", ...])
    with pytest.raises(nx.AxisSizeError, match="share memory"):
        f(torch.ones(4, 3))
