"""SerialLoop: chunked results equal vectorized ones, peak memory falls with k."""
from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import named_axes as nx
from named_axes.parallel import SerialLoop
from named_axes.parallel._serial import SerialLoopError

import _tutorial_program as T

lax = pytest.importorskip("named_axes.lax")


@pytest.mark.parametrize("res", [
    {"batch": SerialLoop(2)}, {"batch": SerialLoop(8)}, {"hidden": SerialLoop(4)},
    {"inputs": SerialLoop(3)}, {"batch": SerialLoop(2), "hidden": SerialLoop(2)},
])
def test_tutorial_loss_and_grads_equal_vectorized(res):
    d = T.data(seed=3)
    ref = T.loss_and_grads(T.xmapped(), *d)
    out = T.loss_and_grads(T.xmapped(res), *d)
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b)


def test_outputs_with_the_loop_axis_are_concatenated():
    x = torch.randn(6, 4)
    f = lambda res: nx.xmap(lambda v: (v * lax.axis_index("i"), v - lax.pmean(v, "i"),
                                       lax.pmax(v, "i"), lax.pmin(v, "i")),
                            in_axes=["i", ...], out_axes=(["i", ...], ["i", ...], [...], [...]),
                            axis_resources=res)
    for a, b in zip(f(None)(x), f({"i": SerialLoop(3)})(x)):
        torch.testing.assert_close(a, b)


def test_psum_of_a_value_lacking_the_loop_axis():
    f = nx.xmap(lambda v, w: lax.psum(w, "i") + v.sum(), in_axes=(["i", ...], [...]),
                out_axes=["i", ...], axis_resources={"i": SerialLoop(2)})
    out = f(torch.ones(4, 2), torch.tensor(1.0))
    assert torch.equal(out, torch.full((4,), 6.0))


@pytest.mark.parametrize("op", ["all_gather", "ppermute"])
def test_collectives_needing_all_chunks_raise(op):
    call = {"all_gather": lambda v: lax.all_gather(v, "i"),
            "ppermute": lambda v: lax.ppermute(v, "i", [(0, 1), (1, 0)])}[op]
    f = nx.xmap(call, in_axes=["i", ...], out_axes=[...] if op == "all_gather" else ["i", ...],
                axis_resources={"i": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=rf"{op}.*'i' \(size 2\).*SerialLoop\(2\)"):
        f(torch.ones(2, 3))


def test_passes_are_bounded_by_the_collectives():
    from named_axes.parallel._serial import SerialEngine

    eng = SerialEngine({"i": 2}, {"i": 4})
    x = nx.named(torch.arange(4.0), ["i", ...])

    def body(leaves, engine=None):
        from named_axes._env import bind

        with bind({"i": 4}, engine=engine):
            v = leaves[0]
            return [lax.psum(v, "i") + lax.psum(v * 2, "i")]
    out = eng.run(body, [x])
    assert float(out[0]) == 18.0 and eng.passes == 3


class PeakMemory(TorchDispatchMode):
    """Bytes of tensor storage created inside the block and still alive: the peak."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.seen = set()

    def _free(self, key, n):
        self.seen.discard(key)
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key = st.data_ptr()
                if key in self.seen or st.nbytes() == 0:
                    continue
                self.seen.add(key)
                self.live += st.nbytes()
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, key, st.nbytes())
        return out


def test_peak_memory_falls_with_k():
    def mlp(x, w1, w2):
        h = torch.relu(x @ w1)            # (batch, 4096): the big intermediate
        h = torch.tanh(h) * h
        return lax.pmean((h @ w2).sum(), "batch")

    x, w1, w2 = torch.randn(64, 16), torch.randn(16, 4096), torch.randn(4096, 8)
    peaks, outs = {}, {}
    for k in (1, 2, 4, 8):
        res = {"batch": SerialLoop(k)} if k > 1 else None
        f = nx.xmap(mlp, in_axes=(["batch", ...], [...], [...]), out_axes=[...],
                    axis_resources=res)
        with torch.no_grad(), PeakMemory() as m:
            outs[k] = f(x, w1, w2)
        peaks[k] = m.peak
    for k in (2, 4, 8):
        torch.testing.assert_close(outs[k], outs[1])
    full = 64 * 4096 * 4                  # one (batch, 4096) float32 intermediate
    assert peaks[1] >= 2 * full
    assert peaks[1] > peaks[2] > peaks[4] > peaks[8], peaks
    assert peaks[8] < 0.3 * peaks[1], peaks
