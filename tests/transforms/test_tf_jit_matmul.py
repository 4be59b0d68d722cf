"""nx.jit's matmul choices: large float32 CPU matmuls in the formulation timed fastest
on this machine (BLAS or oneDNN, transposed or not), tiny ones fused, others unchanged."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx
from named_axes.lax import pdot, pmean, psum
from named_axes.transforms import _backend
from named_axes.transforms import _matmul_choice as mc

HAS_ONEDNN = mc.onednn_mm_op() is not None
FORMS = [f for f in mc.FORMS if HAS_ONEDNN or not f.startswith("onednn")]
LAYOUTS = ["nn", "tn", "nt", "tt"]


def _ops_called(f, *args) -> set:
    """The ops a call runs (a first call, outside the profile, compiles)."""
    with torch.no_grad():
        f(*args)
    with torch.no_grad(), torch.profiler.profile() as prof:
        f(*args)
    return {e.name for e in prof.events()}


def _decomp(op):
    return _backend._decompositions(flat=True)[op]


def _operands(m: int, k: int, n: int, layout: str):
    """Random (m, k) and (k, n) operands, each row-major ("n") or column-major ("t")."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    if layout[0] == "t":
        a = a.t().contiguous().t()
    if layout[1] == "t":
        b = b.t().contiguous().t()
    return a, b


def _key(a, b, bias=False):
    return (a.shape[0], a.shape[1], b.shape[1], a.stride(-1) == 1, b.stride(-1) == 1, bias,
            torch.get_num_threads())


@pytest.fixture
def forced():
    """Set the choice for a product (as if timed); the process's choices come back after."""
    saved = dict(mc._chosen)

    def force(a, b, form, bias=False):
        mc._chosen[_key(a, b, bias)] = form
    yield force
    mc._chosen.clear()
    mc._chosen.update(saved)


@pytest.mark.parametrize("form,layout", list(itertools.product(FORMS, LAYOUTS)))
def test_every_form_computes_the_product(form, layout):
    a, b = _operands(96, 128, 80, layout)
    out = mc.FORMS[form](a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-4)
    assert out.is_contiguous()


@pytest.mark.parametrize("form,layout", list(itertools.product(FORMS, LAYOUTS)))
def test_nx_jit_runs_the_chosen_form(form, layout, forced):
    """Whatever the timing picked, the compiled program computes ``a @ b`` with it."""
    a, b = _operands(96, 128, 80, layout)
    forced(a, b, form)
    f = nx.jit(lambda x, y: x @ y)
    out = f(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-4)
    assert out.is_contiguous()
    ops = _ops_called(f, a, b)
    assert ("nx_jit::onednn_mm" in ops) == form.startswith("onednn")
    assert ("aten::mm" in ops) == form.startswith("blas")


def test_choice_is_timed_once_per_kind_outside_the_trace():
    """``choose`` takes fake operands (a trace's), times real ones outside every tracing
    mode (nothing of the timing enters the graph) and keeps the answer."""
    from torch.fx.experimental.proxy_tensor import make_fx

    a, b = _operands(64, 96, 128, "tn")
    mc._chosen.pop(_key(a, b), None)
    gm = make_fx(lambda x, y: _decomp(torch.ops.aten.mm.default)(x, y),
                 tracing_mode="fake")(a, b)
    form = mc._chosen[_key(a, b)]
    assert form in FORMS
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert not any("rand" in str(t) for t in targets)
    uses_onednn = any("onednn_mm" in str(t) for t in targets)
    assert uses_onednn == form.startswith("onednn")
    torch.testing.assert_close(gm(a, b), a @ b, rtol=1e-5, atol=1e-4)
    before = dict(mc._chosen)
    assert mc.choose(a, b) == form and mc._chosen == before


def test_choice_without_timing_for_a_huge_product():
    """A product estimated above a twentieth of a second is not timed (fake operands:
    nothing is allocated)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.empty(8192, 8192), torch.empty(8192, 8192)
        assert mc.choose(a, b) == ("onednn" if HAS_ONEDNN else "blas")


def test_untimed_products():
    # float64, a small product, no unit stride: not timed
    assert not mc.measured(torch.randn(256, 512).double(), torch.randn(512, 10).double())
    assert not mc.measured(torch.randn(64, 64), torch.randn(64, 64))
    assert not mc.measured(torch.randn(512, 1024)[:, ::2], torch.randn(512, 512))
    assert mc.measured(torch.randn(256, 512), torch.randn(512, 10))


def test_decomposition_sizes_and_dtypes():
    mm, bmm = _decomp(torch.ops.aten.mm.default), _decomp(torch.ops.aten.bmm.default)
    big = torch.randn(128, 64), torch.randn(64, 128)
    torch.testing.assert_close(mm(*big), big[0] @ big[1], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(bmm(big[0][None], big[1][None]), (big[0] @ big[1])[None],
                               rtol=1e-5, atol=1e-4)
    # float64, a batch of two: inductor's own choice
    for a, b, f in [(big[0].double(), big[1].double(), mm),
                    (torch.randn(2, 128, 64), torch.randn(2, 64, 128), bmm)]:
        with torch.profiler.profile() as prof:
            out = f(a, b)
        assert out is NotImplemented or torch.allclose(out, a @ b, rtol=1e-5, atol=1e-4)
        assert "nx_jit::onednn_mm" not in {e.name for e in prof.events()}


@pytest.mark.parametrize("shared", ["a", "b"])
def test_bmm_with_a_shared_operand_is_one_product(shared):
    """A bmm whose operand is the same for every batch (stride 0) runs as one 2-D
    product with the batch folded into the other operand."""
    from torch.fx.experimental.proxy_tensor import make_fx

    bmm = _decomp(torch.ops.aten.bmm.default)
    g = torch.Generator().manual_seed(1)
    if shared == "a":
        a, b = torch.randn(96, 128, generator=g).expand(4, 96, 128), torch.randn(4, 128, 64)
    else:
        a, b = torch.randn(4, 96, 128, generator=g), torch.randn(128, 64).expand(4, 128, 64)
    torch.testing.assert_close(bmm(a, b), torch.bmm(a, b), rtol=1e-5, atol=1e-4)
    assert bmm(a, b).stride() == torch.bmm(a, b).stride()   # a decomposition keeps strides
    gm = make_fx(lambda x, y: bmm(x, y), tracing_mode="fake")(a, b)
    assert torch.ops.aten.bmm.default not in {n.target for n in gm.graph.nodes}
    torch.testing.assert_close(gm(a, b), torch.bmm(a, b), rtol=1e-5, atol=1e-4)
    # both shared, or neither: inductor's own bmm
    for x, y in [(a[:1].expand(4, -1, -1), b[:1].expand(4, -1, -1)),
                 (a.contiguous(), b.contiguous())]:
        out = bmm(x, y)
        assert out is NotImplemented or torch.allclose(out, torch.bmm(x, y), atol=1e-4)


_A, _W = torch.randn(128, 256), torch.randn(256, 64)
_B, _A3 = torch.randn(4, 256, 64), torch.randn(4, 128, 256)
_X, _Y = torch.randn(8, 128, 64), torch.randn(8, 64, 96)
STRIDE_CASES = {
    "shared a (2-D @ 3-D)": (lambda a, b: a @ b, (_A, _B)),
    "shared a (bmm)": (lambda a, b: torch.bmm(a.expand(4, 128, 256), b), (_A, _B)),
    "shared b (bmm)": (lambda a, w: torch.bmm(a, w.expand(4, 256, 64)), (_A3, _W)),
    "3-D @ 2-D": (lambda a, w: a @ w, (_A3, _W)),
    "user's transpose": (lambda a, b: (a @ b).transpose(0, 1), (_A, _B)),
    "2-D transposed": (lambda a, w: (a @ w).t(), (_A, _W)),
    "bmm summed over the batch": (lambda x, y: torch.bmm(x, y).sum(0), (_X, _Y)),
    "split, permuted, summed": (lambda x, y: torch.bmm(x, y).reshape(8, 2, 64, 96)
                                .permute(1, 0, 2, 3).sum(1), (_X, _Y)),
    "linear": (lambda a, w: F.linear(a, w.t(), torch.ones(64)), (_A, _W)),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", list(STRIDE_CASES))
def test_outputs_keep_eager_strides(case, form, monkeypatch):
    """Whatever formulation runs a product, nx.jit's outputs have eager's strides (a
    user's ``out.view(...)`` works as it does eagerly)."""
    f, args = STRIDE_CASES[case]
    monkeypatch.setattr(mc, "choose", lambda a, b, bias=None: "blas" if bias is not None
                        and form.endswith("_t") else form)
    out, eager = nx.jit(lambda *a: f(*a))(*args), f(*args)
    torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-3)
    assert out.stride() == eager.stride()


def test_gradients_keep_eager_strides():
    """The same for gradients (the shared-operand bmm is the backward of a batched sum)."""
    def loss(a, b):
        return ((a @ b) ** 2).sum()

    grads = nx.jit(nx.grad(loss, argnums=(0, 1)))(_A, _B)
    eager = torch.func.grad(loss, argnums=(0, 1))(_A, _B)
    for g, e in zip(grads, eager):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-2)
        assert g.stride() == e.stride()
    # weights that require grad: the compiled forward's output, then .backward()
    a, b = _A.clone().requires_grad_(), _B.clone().requires_grad_()
    out = nx.jit(lambda a, b: a @ b)(a, b)
    assert out.stride() == (_A @ _B).stride() and out.view(4, -1).shape == (4, 128 * 64)
    (out ** 2).sum().backward()
    for g, e in zip((a.grad, b.grad), eager):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-2)


def test_summed_heads_projection_gradient():
    """``psum(o @ wo, 'heads')`` (the xmap attention's output projection): its backward
    holds bmms of a broadcast cotangent; under nx.jit they are single products."""
    g = torch.Generator().manual_seed(2)
    o, wo = torch.randn(4, 96, 32, generator=g), torch.randn(4, 32, 128, generator=g)

    def loss(o, wo):
        return (psum(o @ wo, "heads") ** 2).sum()
    f = nx.xmap(loss, in_axes=[{0: "heads"}, {0: "heads"}], out_axes=[...])
    step = nx.jit(nx.grad(f, argnums=(0, 1)))
    want = torch.func.grad(lambda o, wo: (torch.bmm(o, wo).sum(0) ** 2).sum(),
                           argnums=(0, 1))(o, wo)
    for got, ref in zip(step(o, wo), want):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)
    with torch.profiler.profile() as prof:
        step(o, wo)
    assert "aten::bmm" not in {e.name for e in prof.events()}   # folded: _fold_pass


def test_small_single_batch_bmm_is_a_two_dimensional_product():
    """A pdot lowers to a bmm of one batch; as a fused multiply-and-sum it is computed
    2-D, so the graph's view of the result back to 2-D cancels (no per-call reinterpret
    of a 3-D output buffer)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    bmm = _decomp(torch.ops.aten.bmm.default)
    a, b = torch.randn(1, 8, 16), torch.randn(1, 16, 4)
    torch.testing.assert_close(bmm(a, b), torch.bmm(a, b))
    gm = make_fx(lambda x, y: bmm(x, y)[0], tracing_mode="fake")(a, b)
    sums = [n for n in gm.graph.nodes if n.target == torch.ops.aten.sum.dim_IntList]
    assert len(sums) == 1 and sums[0].meta["val"].dim() == 2
    for x, y in [(torch.randn(2, 8, 16), torch.randn(2, 16, 4)),      # two batches
                 (torch.randn(1, 8, 16).double(), torch.randn(1, 16, 4).double())]:
        torch.testing.assert_close(bmm(x, y), torch.bmm(x, y))
    ints = torch.ones(1, 2, 3, dtype=torch.int64), torch.ones(1, 3, 2, dtype=torch.int64)
    out = bmm(*ints)   # not a floating product: inductor's own decomposition (or none)
    assert out is NotImplemented or torch.equal(out, torch.bmm(*ints))


@pytest.mark.parametrize("form", [f for f in FORMS if not f.endswith("_t")])
def test_linear_with_bias(form, forced):
    lin = torch.nn.Linear(256, 96)
    x = torch.randn(64, 256)
    forced(x, lin.weight.t(), form, bias=True)
    f = nx.jit(lambda x: lin(x).relu())
    with torch.no_grad():
        torch.testing.assert_close(f(x), lin(x).relu(), rtol=1e-5, atol=1e-5)
    assert ("nx_jit::onednn_mm" in _ops_called(f, x)) == (form == "onednn")


def _named_loss(w1, w2, images, labels):
    hidden = torch.relu(pdot(images, w1, "inputs"))
    logits = pdot(hidden, w2, "hidden")
    predictions = logits - nx.logsumexp(logits, "classes")
    targets = nx.one_hot(labels, psum(1, "classes"), dim="classes")
    return -pmean(psum(targets * predictions, "classes"), "batch")


def _loss(w1, w2, images, labels):
    logits = torch.relu(images @ w1) @ w2
    predictions = logits - torch.logsumexp(logits, 1, keepdim=True)
    return -(F.one_hot(labels, logits.shape[1]) * predictions).sum(1).mean()


def test_training_step_matches_eager():
    """The tutorial's step at a size whose matmuls are timed, in the forms chosen here."""
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(256, 128, generator=g) / 16
    w2 = torch.randn(128, 10, generator=g) / 11
    images = torch.randn(64, 256, generator=g)
    labels = torch.randint(0, 10, (64,), generator=g)
    axes = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
            ["batch", ...]]
    step = nx.jit(nx.value_and_grad(nx.xmap(_named_loss, in_axes=axes, out_axes=[...]),
                                    argnums=(0, 1)))
    value, (g1, g2) = step(w1, w2, images, labels)
    ref_value, ref_grads = torch.func.grad_and_value(_loss, argnums=(0, 1))(
        w1, w2, images, labels)[::-1]
    torch.testing.assert_close(value, ref_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g1, ref_grads[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(g2, ref_grads[1], rtol=1e-4, atol=1e-6)
    assert g1.is_contiguous() and g2.is_contiguous()
