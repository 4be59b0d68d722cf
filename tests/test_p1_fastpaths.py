"""The eager fast lanes P1 (the xmap tutorial's loss) runs through: one-name collectives,
cached pdot plans, the plain-mm contraction, nx.<reduction>(x, name), broadcast-by-name
with cached align plans, and one_hot's layout.  Each is checked against the general
path or a loop / plain-torch reference, and errors against a cold call."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes import _env
from named_axes._einsum2 import einsum2_eager


def _r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("op, ref", [
    ("psum", lambda t, d: t.sum(d)), ("pmean", lambda t, d: t.mean(d)),
    ("pmax", lambda t, d: t.amax(d)), ("pmin", lambda t, d: t.amin(d)),
])
@pytest.mark.parametrize("dim", [0, 1])
def test_one_name_collectives_match_loops(op, ref, dim):
    full = _r(3, 4, 5)
    names = ("a", "b")
    f = nx.xmap(lambda x: getattr(nx.lax, op)(x, names[dim]),
                in_axes=["a", "b", ...], out_axes=[n for n in names if n != names[dim]] + [...])
    got = f(full)
    # loop reference over the other named index
    other = 1 - dim
    want = torch.stack([ref(full.select(other, j), dim if dim < other else dim - 1)
                        for j in range(full.shape[other])])
    torch.testing.assert_close(got, want)


def test_psum_of_number_is_axis_size_and_bound_size_mismatch_still_raises():
    f = nx.xmap(lambda x: x * nx.lax.psum(1, "i"), in_axes=["i", ...], out_axes=["i", ...])
    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 3.0))
    # a value whose 'i' differs from the bound size: the general path's error
    bad = nx.named(torch.ones(4), "i ...")
    g = nx.xmap(lambda x: nx.lax.psum(bad, "i"), in_axes=["i", ...], out_axes=[...])
    with pytest.raises(nx.AxisSizeError, match="has size 4 in the value but 3 where it is bound"):
        g(torch.ones(3))


def test_engine_flag_follows_the_frames():
    from named_axes._engine import EngineBase

    class Engine(EngineBase):
        pass
    assert not _env._state.engine
    with _env.bind({"i": 2}):
        assert not _env._state.engine
        with _env.bind({"j": 2}, engine=Engine()):
            assert _env._state.engine
            with _env.bind({"k": 2}):
                assert _env._state.engine
            assert _env._state.engine
        assert not _env._state.engine
    assert not _env._state.engine


def test_engine_method_is_used_by_the_one_name_lane():
    from named_axes._engine import EngineBase

    calls = []

    class Engine(EngineBase):
        def collective(self, op):
            return self.psum if op == "psum" else None

        def psum(self, x, names):
            calls.append(names)
            return "engine"
    x = nx.named(torch.ones(2, 3), "i ...")
    with _env.bind({"i": 2}, engine=Engine()):
        assert nx.lax.psum(x, "i") == "engine"
    assert calls == [("i",)]


def test_pdot_cached_plan_str_and_tuple_names_agree_and_errors_stay():
    x, w = nx.named(_r(4, 5), "b k ..."), nx.named(_r(5, 3, seed=1), "k h ...")
    want = torch.einsum("bk,kh->bh", x._data, w._data)
    for name in ("k", ("k",), "k"):
        got = nx.lax.pdot(x, w, name)
        assert got.named_shape == {"b": 4, "h": 3}
        torch.testing.assert_close(nx.positional(got, "b h ..."), want)
    bad = nx.named(_r(6, 3, seed=1), "k h ...")
    with pytest.raises(nx.AxisSizeError):
        nx.lax.pdot(x, bad, "k")
    nx.clear_caches()
    with pytest.raises(nx.AxisSizeError) as cold:
        nx.lax.pdot(x, bad, "k")
    nx.lax.pdot(x, w, "k")
    with pytest.raises(nx.AxisSizeError) as warm:
        nx.lax.pdot(x, bad, "k")
    assert str(warm.value) == str(cold.value)


@pytest.mark.parametrize("eq, sx, sy", [
    ("ab,bc->ac", (3, 4), (4, 5)),
    ("ab,bc->ca", (3, 4), (4, 5)),
    ("ba,bc->ac", (4, 3), (4, 5)),
    ("ab,bc->ac", (3, 1), (4, 5)),   # size-1 contraction broadcasts: einsum's path
])
def test_einsum2_eager_plain_mm_lane(eq, sx, sy):
    x, y = _r(*sx), _r(*sy, seed=1)
    torch.testing.assert_close(einsum2_eager(eq, x, y), torch.einsum(eq, x, y))


@pytest.mark.parametrize("fn", ["sum", "mean", "amax", "logsumexp", "prod", "argmax"])
@pytest.mark.parametrize("dim", ["c", 0, -1])
def test_reduction_by_name_lane_matches_keyword_path(fn, dim):
    x = nx.named(_r(3, 4, 5), "b c ...")
    fast = getattr(nx, fn)(x, dim)
    slow = getattr(nx, fn)(x, axis=dim)
    if isinstance(fast, nx.NamedTensor):
        assert fast.named_shape == slow.named_shape
        spec = " ".join(fast.named_shape) + " ..."
        fast, slow = nx.positional(fast, spec), nx.positional(slow, spec)
    torch.testing.assert_close(fast, slow)


def test_broadcast_by_name_with_cached_align_plans():
    a = nx.named(_r(3, 4, 2), "b c ...")
    b = nx.named(_r(4, 3, seed=1), "c b ...")
    c = nx.named(_r(3, seed=2), "b ...")
    for _ in range(2):   # cold, then the cached plan
        got = nx.positional(a - nx.named(_r(4, 3, 2, seed=1), "c b ..."), "b c ...")
        want = a._data - _r(4, 3, 2, seed=1).permute(1, 0, 2)
        torch.testing.assert_close(got, want)
        got = nx.positional(a * c, "b c ...")
        torch.testing.assert_close(got, a._data * c._data[:, None, None])
        got = nx.positional(b + c, "c b ...")
        torch.testing.assert_close(got, b._data + c._data[None, :])


def test_one_hot_product_keeps_the_gradient_contiguous():
    logits = _r(6, 4).requires_grad_()
    labels = torch.tensor([0, 3, 1, 1, 2, 0])

    def loss(lg, lb):
        t = nx.one_hot(lb, 4, dim="classes", dtype=lg.dtype)
        return nx.lax.psum(t * lg, "classes")
    f = nx.xmap(loss, in_axes=[["b", "classes", ...], ["b", ...]], out_axes=["b", ...])
    out = f(logits, labels)
    torch.testing.assert_close(out, (torch.nn.functional.one_hot(labels, 4) * logits).sum(1))
    (g,) = torch.autograd.grad(out.sum(), logits)
    assert g.is_contiguous()
    torch.testing.assert_close(g, torch.nn.functional.one_hot(labels, 4).double())
