"""nx.jit's post-grad fold: a bmm summed over its batch becomes one 2-D product."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import named_axes as nx
from named_axes.lax import psum
from named_axes.transforms._fold_pass import FoldSummedBatch, OwnPasses

BMM = torch.ops.aten.bmm.default


def _folded(f, *args):
    """``f`` traced, the pass run; (graph module, whether a bmm is left)."""
    gm = make_fx(f, tracing_mode="fake")(*args)
    FoldSummedBatch()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, BMM in {n.target for n in gm.graph.nodes}


def _operands(h=4, m=96, k=32, n=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(h, m, k, generator=g), torch.randn(h, k, n, generator=g)


FOLDED = {
    "sum0": lambda a, b: torch.bmm(a, b).sum(0),
    "sum-3": lambda a, b: torch.bmm(a, b).sum(-3),
    # P2's shape: rows split into (batch, seq), heads moved next to the columns, summed
    "split-permute": lambda a, b: torch.bmm(a, b).reshape(4, 8, 12, 80)
                                           .permute(1, 2, 0, 3).sum(2),
    "permute-only": lambda a, b: torch.bmm(a, b).permute(2, 0, 1).sum(1),
}


@pytest.mark.parametrize("name", list(FOLDED))
def test_summed_bmm_is_folded(name):
    a, b = _operands()
    gm, left = _folded(FOLDED[name], a, b)
    assert not left
    torch.testing.assert_close(gm(a, b), FOLDED[name](a, b), rtol=1e-5, atol=1e-4)


KEPT = {
    "sum over rows": lambda a, b: torch.bmm(a, b).sum(1),
    "keepdim": lambda a, b: torch.bmm(a, b).sum(0, keepdim=True),
    "two sums": lambda a, b: torch.bmm(a, b).sum((0, 1)),
    "another user": lambda a, b: (lambda c: (c.sum(0), c))(torch.bmm(a, b)),
    "reshape merging the batch": lambda a, b: torch.bmm(a, b).reshape(4 * 96, 80).sum(0),
    "sum over the moved rows": lambda a, b: torch.bmm(a, b).permute(1, 0, 2).sum(0),
    "dtype": lambda a, b: torch.bmm(a, b).sum(0, dtype=torch.float64),
}


@pytest.mark.parametrize("name", list(KEPT))
def test_other_uses_are_kept(name):
    a, b = _operands()
    gm, left = _folded(KEPT[name], a, b)
    assert left
    got, want = gm(a, b), KEPT[name](a, b)
    for x, y in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-4)


def test_integer_and_single_batch_are_kept():
    ints = torch.ones(3, 4, 5, dtype=torch.int64), torch.ones(3, 5, 2, dtype=torch.int64)
    assert _folded(lambda a, b: torch.bmm(a, b).sum(0), *ints)[1]
    a, b = _operands(h=1)
    assert _folded(lambda a, b: torch.bmm(a, b).sum(0), a, b)[1]


def test_cache_key_part_is_stable():
    assert FoldSummedBatch().uuid() == FoldSummedBatch().uuid()
    assert OwnPasses().uuid() == OwnPasses().uuid() != FoldSummedBatch().uuid()


def test_heads_projection_under_jit_has_no_bmm():
    """``psum(o @ wo, 'heads')`` forward and gradients: single products only."""
    g = torch.Generator().manual_seed(2)
    o, wo = torch.randn(4, 96, 32, generator=g), torch.randn(4, 32, 128, generator=g)

    def project(o, wo):
        return psum(o @ wo, "heads")
    f = nx.xmap(project, in_axes=[{0: "heads"}, {0: "heads"}], out_axes=[...])
    out = nx.jit(f)(o, wo)
    torch.testing.assert_close(out, torch.bmm(o, wo).sum(0), rtol=1e-5, atol=1e-4)
    step = nx.jit(nx.value_and_grad(lambda o, wo: (f(o, wo) ** 2).sum(), argnums=(0, 1)))
    value, grads = step(o, wo)
    ref = torch.func.grad_and_value(lambda o, wo: (torch.bmm(o, wo).sum(0) ** 2).sum(),
                                    argnums=(0, 1))(o, wo)
    torch.testing.assert_close(value, ref[1], rtol=1e-5, atol=1e-2)
    for got, want in zip(grads, ref[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    with torch.profiler.profile() as prof:
        step(o, wo)
    assert "aten::bmm" not in {e.name for e in prof.events()}
