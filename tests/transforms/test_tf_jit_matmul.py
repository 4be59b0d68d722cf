"""nx.jit's matmul choices: large float32 CPU matmuls on oneDNN, others unchanged."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx
from named_axes.lax import pdot, pmean, psum
from named_axes.transforms import _backend

needs_onednn = pytest.mark.skipif(_backend._onednn_mm_op() is None, reason="no oneDNN")


def _ops_called(f, *args) -> set:
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


@needs_onednn
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_large_mm_runs_on_onednn(layout):
    a, b = _operands(96, 128, 80, layout)
    f = nx.jit(lambda x, y: x @ y)
    torch.testing.assert_close(f(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert "nx_jit::onednn_mm" in _ops_called(f, a, b)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_narrow_mm_runs_transposed_on_blas(layout):
    """A large matmul with a narrow output runs as ``(b.T @ a.T).T`` on aten's mm."""
    a, b = _operands(256, 512, 10, layout)
    f = nx.jit(lambda x, y: x @ y)
    out = f(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-4)
    assert out.is_contiguous()
    ops = _ops_called(f, a, b)
    assert "nx_jit::onednn_mm" not in ops and "aten::mm" in ops


def test_narrow_mm_decomposition_limits():
    mm = _decomp(torch.ops.aten.mm.default)
    # float64, a short contraction, a small product: not transposed
    for a, b in [(torch.randn(256, 512).double(), torch.randn(512, 10).double()),
                 (torch.randn(8192, 8), torch.randn(8, 10)),
                 (torch.randn(64, 128), torch.randn(128, 10))]:
        assert _backend._narrow_mm(a, b) is None
    a, b = torch.randn(256, 512), torch.randn(512, 10)
    torch.testing.assert_close(mm(a, b), a @ b, rtol=1e-5, atol=1e-4)


@needs_onednn
def test_decomposition_sizes_and_dtypes():
    mm, bmm = _decomp(torch.ops.aten.mm.default), _decomp(torch.ops.aten.bmm.default)
    big = torch.randn(128, 64), torch.randn(64, 128)
    torch.testing.assert_close(mm(*big), big[0] @ big[1], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(bmm(big[0][None], big[1][None]), (big[0] @ big[1])[None],
                               rtol=1e-5, atol=1e-4)
    # float64, a short contraction, a batch of two: not oneDNN's (inductor's own choice)
    for a, b, f in [(big[0].double(), big[1].double(), mm),
                    (torch.randn(1024, 8), torch.randn(8, 1024), mm),
                    (torch.randn(2, 128, 64), torch.randn(2, 64, 128), bmm)]:
        with torch.profiler.profile() as prof:
            out = f(a, b)
        assert out is NotImplemented or torch.allclose(out, a @ b, rtol=1e-5, atol=1e-4)
        assert "nx_jit::onednn_mm" not in {e.name for e in prof.events()}


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


@needs_onednn
def test_linear_with_bias():
    lin = torch.nn.Linear(256, 96)
    f = nx.jit(lambda x: lin(x).relu())
    x = torch.randn(64, 256)
    with torch.no_grad():
        torch.testing.assert_close(f(x), lin(x).relu(), rtol=1e-5, atol=1e-5)
    assert "nx_jit::onednn_mm" in _ops_called(f, x)


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
    """The tutorial's step at a size whose matmuls go to oneDNN (where there is one)."""
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
    if _backend._onednn_mm_op() is not None:
        assert "nx_jit::onednn_mm" in _ops_called(step, w1, w2, images, labels)
