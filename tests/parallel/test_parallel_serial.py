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


@pytest.mark.parametrize("op", ["psum", "pmean", "pmax"])
def test_a_pytree_collective_costs_one_replay_for_all_its_leaves(op):
    # pmean of a gradient tree over a loop axis (GPT-J's step): one pass for the tree
    from named_axes.parallel._serial import SerialEngine

    eng = SerialEngine({"i": 2}, {"i": 4})
    x = nx.named(torch.arange(8.0).reshape(4, 2), ["i", ...])

    def body(leaves, engine=None):
        from named_axes._env import bind

        with bind({"i": 4}, engine=engine):
            v = leaves[0]
            tree = {"a": v, "b": (v * 2, v.sum()), "c": [v - 1, 3.0 * v]}
            out = getattr(lax, op)(tree, "i")
            return [out["a"] + out["b"][0], out["b"][1], out["c"][0], out["c"][1],
                    getattr(lax, op)(v + out["c"][1], "i")]
    out = eng.run(body, [x])
    assert eng.passes == 3   # the tree, then the collective that reads it, then done
    full = torch.arange(8.0).reshape(4, 2)
    red = {"psum": lambda t: t.sum(0), "pmean": lambda t: t.mean(0),
           "pmax": lambda t: t.amax(0)}[op]
    c1 = red(3.0 * full)
    torch.testing.assert_close(out[0], red(full) + red(2 * full))
    torch.testing.assert_close(out[1], red(full.sum(1)))
    torch.testing.assert_close(out[2], red(full - 1))
    torch.testing.assert_close(out[3], c1)
    torch.testing.assert_close(out[4], red(full + c1))


def test_serial_loop_tree_collectives_match_vectorized_with_gradients():
    def step(w, x):
        def loss(w):
            return ((x @ w["a"]).tanh() @ w["b"]).pow(2).sum()
        g = nx.grad(loss)(w)
        return lax.pmean(g, "batch")
    w = {"a": torch.randn(3, 4), "b": torch.randn(4, 2)}
    x = torch.randn(6, 3)
    spec = dict(in_axes=({}, ["batch", ...]), out_axes={})
    ref = nx.xmap(step, **spec)(w, x)
    got = nx.xmap(step, **spec, axis_resources={"batch": SerialLoop(3)})(w, x)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k])


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


# -- ops that read across a loop axis: exact or SerialLoopError (issue 11, item 4) ----------

def _both(fn, out_axes, *args, loops=2, axis_sizes=None):
    """(vectorized, SerialLoop on 'b') results of the same program."""
    f = lambda res: nx.xmap(fn, in_axes=[["b", ...]] * len(args), out_axes=out_axes,  # noqa
                            axis_resources=res, axis_sizes=axis_sizes)
    return f(None)(*args), f({"b": SerialLoop(loops)})(*args)


_X, _Y = torch.randn(4, 3), torch.randn(4, 3)


@pytest.mark.parametrize("spec", ["n{b},n{b}->n", "n{b},n{b}", "n{b},m{b}->nm",
                                  "n{b},n{b},n->"])
def test_einsum_contracting_a_loop_axis_is_exact(spec):
    # was: one chunk's partial sum
    extra = (torch.ones(3),) if spec.count(",") == 2 else ()
    ref, out = _both(lambda v, w: nx.einsum(spec, v, w, *extra), [...], _X, _Y)
    torch.testing.assert_close(out, ref)
    # and differentiable (the gradient taken outside the xmap)
    xs = [_X.clone().requires_grad_() for _ in range(2)]
    for res, x in zip((None, {"b": SerialLoop(2)}), xs):
        y = nx.xmap(lambda v, w: nx.einsum(spec, v, w, *extra), in_axes=[["b", ...]] * 2,
                    out_axes=[...], axis_resources=res)(x, _Y)
        (y ** 2).sum().backward()
    torch.testing.assert_close(xs[1].grad, xs[0].grad)


def test_einsum_broadcast_along_a_loop_axis_has_the_chunk_size():
    ref, out = _both(lambda v, w: nx.einsum("n->n{b}", torch.arange(3.)) * v, ["b", ...], _X, _Y)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("labels", [torch.tensor([0, 1, 2]), torch.tensor([[0, 3], [3, 1]])])
def test_one_hot_along_a_loop_axis_is_exact(labels):
    # was: the classes axis doubled (each chunk built all 4 classes)
    ref, out = _both(lambda v, w: nx.one_hot(labels, 4, dim="b") * 1.0, ["b", ...], _X, _Y)
    assert out.shape == ref.shape == (4,) + tuple(labels.shape)
    torch.testing.assert_close(out, ref)


def test_pshuffle_over_a_loop_axis_raises_with_the_full_size():
    # was: "perm must be a permutation of range(2)" (the chunk size)
    f = nx.xmap(lambda v: lax.pshuffle(v, "b", [1, 2, 3, 0]), in_axes=["b", ...],
                out_axes=["b", ...], axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"pshuffle.*'b' \(size 4\) is mapped to SerialLoop\(2\)"):
        f(_X)


@pytest.mark.parametrize("op", [
    lambda v: v.sum("b"), lambda v: nx.sum(v, ("b", 0)), lambda v: v.mean("b"),
    lambda v: nx.logsumexp(v, "b"), lambda v: nx.argmax(v, "b"), lambda v: v.max("b")[0],
    lambda v: nx.var(v, "b"), lambda v: v.prod("b"), lambda v: nx.norm(v, dim="b"),
    lambda v: nx.all(v > 0, "b"),
])
def test_named_reductions_over_a_loop_axis_raise(op):
    f = nx.xmap(op, in_axes=["b", ...], out_axes=[...], axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"over axis 'b': 'b' is mapped to SerialLoop\(2\), so "
                                              r"each chunk holds 2 of its 4 entries"):
        f(_X)


@pytest.mark.parametrize("op", [
    lambda v: nx.softmax(v, "b"), lambda v: nx.log_softmax(v, ("b", 0)), lambda v: v.cumsum("b"),
    lambda v: v.sort("b")[0], lambda v: torch.nn.functional.normalize(v, dim="b"),
])
def test_dimwise_ops_over_a_loop_axis_raise(op):
    f = nx.xmap(op, in_axes=["b", ...], out_axes=["b", ...], axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"over axis 'b': 'b' is mapped to SerialLoop\(2\)"):
        f(_X)


@pytest.mark.parametrize("fn, out_axes", [
    (lambda v, w: lax.psum(v, ("b", 0)), [...]),          # positional ints (item 7)
    (lambda v, w: lax.pmean(v, ("b", 0)), [...]),
    (lambda v, w: lax.pmean((v > 0).long(), "b"), [...]),  # a float mean of integers
    (lambda v, w: lax.pdot(v, w, ("b",)), [...]),
    (lambda v, w: v * lax.psum(1, "b") + lax.axis_index("b"), ["b", ...]),
    (lambda v, w: lax.psum(lax.axis_index("b"), "b") * 1.0, [...]),
    (lambda v, w: nx.einsum("n{b}->n", torch.ones(3)), [...]),   # a replicated sum: x4
])
def test_collectives_over_a_loop_axis_are_exact(fn, out_axes):
    ref, out = _both(fn, out_axes, _X, _Y)
    torch.testing.assert_close(out, ref)


def test_axis_index_of_a_tuple_with_a_loop_axis_is_linearized_row_major():
    # JAX's order: the first axis the slowest (was: refused under SerialLoop)
    x = torch.arange(4 * 3 * 2.).reshape(4, 3, 2)
    f = lambda res: nx.xmap(  # noqa: E731
        lambda v: v * lax.axis_index(("b", "c")) + lax.axis_index(("c", "b")),
        in_axes=["b", "c", ...], out_axes=["b", "c", ...], axis_resources=res)(x)
    want = x * torch.arange(12.).reshape(4, 3, 1) + torch.arange(12.).reshape(3, 4).T[..., None]
    for res in ({}, {"b": SerialLoop(2)}, {"b": SerialLoop(2), "c": SerialLoop(3)}):
        torch.testing.assert_close(f(res), want)


@pytest.mark.parametrize("fn", [
    lambda v, w: nx.grad(lambda q: lax.psum((q * w).sum(), "b"))(v),
    lambda v, w: nx.grad(lambda q: lax.pdot(q, w, "b").sum())(v),
    lambda v, w: nx.grad(lambda q: nx.einsum("n{b},n{b}->", q, w))(v),
])
def test_gradient_inside_the_body_through_a_loop_collective_raises(fn):
    # was: zeros (the replayed value is a constant for a gradient taken inside the body)
    f = nx.xmap(fn, in_axes=[["b", ...]] * 2, out_axes=["b", ...],
                axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"over axis 'b' inside a derivative taken within "
                                              r"the xmap body"):
        f(_X, _Y)
    # the gradient of the whole xmap is exact
    g = lambda res: nx.grad(nx.xmap(lambda v, w: lax.psum((v * w).sum(), "b"),  # noqa
                                    in_axes=[["b", ...]] * 2, out_axes=[...],
                                    axis_resources=res))(_X, _Y)
    torch.testing.assert_close(g({"b": SerialLoop(2)}), g(None))


def test_collective_over_a_loop_axis_inside_nx_vmap_raises():
    f = nx.xmap(lambda v, w: nx.vmap(lambda q: lax.psum(q * w, "b"))(v), in_axes=[["b", ...]] * 2,
                out_axes=[...], axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"axes made afresh on every call, as nx.vmap's"):
        f(_X, _Y)


def test_named_shape_in_a_chunk_is_the_axis_size_and_positional_refuses():
    """A chunk's value reports the axis size where it is bound (not the chunk's); making
    a loop axis positional inside the body would read across chunks: refused."""
    x = torch.arange(4.)
    for res in ({}, {'b': nx.SerialLoop(2)}):
        f = nx.xmap(lambda v: v * v.named_shape['b'], in_axes=['b', ...],
                    out_axes=['b', ...], axis_resources=res)
        torch.testing.assert_close(f(x), x * 4)
    g = nx.xmap(lambda v: nx.positional(v, {0: 'b'}).sum() + 0 * v, in_axes=['b', ...],
                out_axes=['b', ...], axis_resources={'b': nx.SerialLoop(2)})
    with pytest.raises(nx.AxisResourceError, match=r"positional\(\) over axis 'b': 'b' is "
                                                    r"mapped to SerialLoop\(2\), so each chunk "
                                                    r"holds 2 of its 4 entries"):
        g(x)


@pytest.mark.parametrize("op", ["pmax", "pmin"])
@pytest.mark.parametrize("chunks", [2, 4])
def test_extreme_gradient_shares_ties_across_chunks_evenly(op, chunks):
    """Ties of pmax/pmin spread over chunks share the cotangent evenly among all tied
    entries, as the vectorized run (amax) does: the chunks were combined by a pairwise
    torch.maximum, which halved the share per pair (1/4, 1/4, 1/2 for three ties; found
    by the mesh oracle, seed 303, p303_00256).  The tangent (jvp) is the same average."""
    x = torch.tensor([[0.5, 0.5, 0.5, -0.9], [0.1, 0.7, 0.1, 0.3], [0.2, 0.2, 0.2, 0.2]])
    if op == "pmin":
        x = -x
    fn = getattr(lax, op)
    kw = dict(in_axes=(['c', 'a', ...],), out_axes=['c', ...])
    want_f = nx.xmap(lambda v: fn(v, 'a'), **kw)
    got_f = nx.xmap(lambda v: fn(v, 'a'), axis_resources={'a': nx.SerialLoop(chunks)}, **kw)
    ct = torch.tensor([1.0, 2.0, 3.0])
    grads = []
    for f in (want_f, got_f):
        v = x.clone().requires_grad_()
        (f(v) * ct).sum().backward()
        grads.append(v.grad)
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(grads[0][0, :3], torch.full((3,), 1 / 3))
    t = torch.linspace(-1, 1, 12).reshape(3, 4)
    torch.testing.assert_close(nx.jvp(got_f, (x,), (t,))[1], nx.jvp(want_f, (x,), (t,))[1])


@pytest.mark.parametrize("vmap", [nx.vmap, torch.func.vmap])
def test_vmap_around_a_serial_loop_xmap_equals_the_vectorized_run(vmap):
    """A SerialLoop xmap inside vmap: its seed is drawn past vmap's randomness check (was:
    'random operation in randomness error mode'), and the check that a replicated output
    is the same for every chunk reads every batch entry (torch.equal has no batching rule)."""
    def f(v, w):
        return lax.psum(torch.sin(v) * w, "b"), v * 2
    x, w = torch.randn(3, 4, 5), torch.randn(4, 5)
    kw = dict(in_axes=(["b", ...], ["b", ...]), out_axes=([...], ["b", ...]))
    want = vmap(nx.xmap(f, **kw), in_dims=(0, None))(x, w)
    loop = nx.xmap(f, axis_resources={"b": SerialLoop(2)}, **kw)
    torch.testing.assert_close(vmap(loop, in_dims=(0, None))(x, w), want)
    grad = lambda g: torch.func.vmap(torch.func.grad(lambda v: g(v, w)[0].sum()))(x)  # noqa
    torch.testing.assert_close(grad(loop), grad(nx.xmap(f, **kw)))


def test_chunk_dependent_output_under_vmap_still_raises():
    # (a Python counter makes the chunks differ: a plain draw, torch.rand(()), did so
    # before draws under SerialLoop equalled the vectorized run's, the same in every chunk)
    calls = []
    g = nx.xmap(lambda v: lax.psum(v, "b") + len(calls.append(0) or calls), in_axes=["b", ...],
                out_axes=[...], axis_resources={"b": SerialLoop(2)})
    with pytest.raises(SerialLoopError, match=r"chunk 1 computed a different value"):
        torch.func.vmap(g, randomness="same")(torch.randn(3, 4))


def test_serial_loop_under_nx_jit_is_refused_with_a_named_axis_error():
    """The loop replays chunks on values, which make_fx's trace does not have: a clear
    AxisResourceError, not torch's data-dependent guard error."""
    f = nx.xmap(lambda x: lax.psum(x, "b"), in_axes=["b", ...], out_axes=[...],
                axis_resources={"b": SerialLoop(2)})
    with pytest.raises(nx.AxisResourceError, match="SerialLoop axis inside nx.jit"):
        nx.jit(f)(torch.ones(4, 3))


def test_one_chunk_traces_under_nx_jit():
    # JAX's testNoTracerLeak: linearize sin, then xmap the tangent map over an axis on
    # SerialLoop(1), all under jit (was: SerialLoop's seed draw read a value the trace
    # does not have). One chunk holds the whole axis: it runs as the vectorized program.
    def xmap_linearize(xs):
        eye = torch.eye(xs.shape[0], dtype=torch.float32)
        _, grad_f = nx.linearize(torch.sin, xs)
        return nx.xmap(grad_f, in_axes=["i", ...], out_axes=["i", ...],
                       axis_resources={"i": SerialLoop(1)})(eye)

    xs = torch.arange(1, 4).float()
    for backend in ("eager", "inductor"):
        got = nx.jit(xmap_linearize, backend=backend)(xs)
        torch.testing.assert_close(got, torch.diag(torch.cos(xs)))


def test_one_chunk_takes_every_collective():
    # a collective that needs every chunk at once is fine when there is one chunk
    f = lambda res: nx.xmap(lambda v: lax.all_gather(v, "b").sum(0) * v,  # noqa: E731
                            in_axes=["b", ...], out_axes=["b", ...], axis_resources=res)(_X)
    torch.testing.assert_close(f({"b": SerialLoop(1)}), f({}))
