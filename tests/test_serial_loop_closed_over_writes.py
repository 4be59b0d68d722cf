"""A tensor the body closes over (not an xmap argument), written in place under SerialLoop:
once, as the vectorized run writes it.  Each chunk ran the whole body, so a closed-over
counter (``acc.add_(1)``), a buffer (``buf += psum(x)``, ``out=buf``) or a module's
``num_batches_tracked`` was written once per chunk (and once more per replay pass),
silently.  Every chunk now starts from the state the call found."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

L = nx.lax


def _run(body, chunks):
    state = {"acc": torch.zeros(()), "buf": torch.zeros(3),
             "w": nx.named(torch.zeros(2), "j"), "bn": torch.nn.BatchNorm1d(3)}
    res = {} if chunks is None else {"axis_resources": {"i": nx.SerialLoop(chunks)}}
    out = nx.xmap(lambda x: body(x, state), in_axes=["i", ...], out_axes=["i", ...],
                  **res)(torch.arange(12.0).reshape(4, 3))
    after = [state["acc"], state["buf"], nx.positional(state["w"], "j"),
             state["bn"].num_batches_tracked]
    return [out.tolist()] + [t.tolist() for t in after]


BODIES = {
    "counter_read": lambda x, s: x * s["acc"].add_(1),
    "iadd_psum": lambda x, s: (s["buf"].__iadd__(L.psum(x, "i")), x * 2)[1],
    "write_after_psum": lambda x, s: x + L.psum(x, "i") + s["buf"].add_(1),
    "named_closed_over": lambda x, s: (s["w"].add_(1), x * 2)[1],
    "module_counter": lambda x, s: (s["bn"].num_batches_tracked.add_(1), x)[1],
    "out=": lambda x, s: (torch.add(s["buf"], 1, out=s["buf"]), x)[1],
    "setitem": lambda x, s: (s["buf"].__setitem__(0, s["buf"][0] + 1), x)[1],
    "a_view": lambda x, s: (s["buf"][1:].add_(1), x)[1],
}


@pytest.mark.parametrize("chunks", [2, 4])
@pytest.mark.parametrize("name", list(BODIES))
def test_a_closed_over_write_happens_once(name, chunks):
    assert _run(BODIES[name], chunks) == _run(BODIES[name], None)


def test_the_counter_reads_one_write():
    acc = torch.zeros(())
    f = nx.xmap(lambda x: x * acc.add_(1), in_axes=["i", ...], out_axes=["i", ...],
                axis_resources={"i": nx.SerialLoop(2)})
    assert f(torch.ones(4)).tolist() == [1.0] * 4 and float(acc) == 1.0
    assert f(torch.ones(4)).tolist() == [2.0] * 4 and float(acc) == 2.0   # next call: on


@pytest.mark.parametrize("chunks", [2, 4])
def test_an_input_lacking_the_loop_axes_written_before_a_collective(chunks):
    # (was refused as a replayed write: each chunk now starts from the call's state)
    def run(res):
        w = torch.zeros(3)
        f = nx.xmap(lambda x, w: L.psum(x * w.add_(1), "i"), in_axes=(["i", ...], [...]),
                    out_axes=[...], **res)
        return f(torch.arange(12.0).reshape(4, 3), w).tolist(), w.tolist()

    assert run({"axis_resources": {"i": nx.SerialLoop(chunks)}}) == run({})
