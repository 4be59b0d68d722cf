"""The matmul lowering and the unnamed-NamedTensor unwrapping (PROFILE.md items 1 and 2).

``a @ b`` with names on both sides (or names on one side and positional batch dims
on the other) is one folded ``matmul``: shared names are batch dims, names of one side
fold into its row / column dim.  These tests pin it against the loop over named
indices (values and gradients), check that it never materializes a tensor larger than
its operands and result, and that NamedTensors without names (xmap's ``in_axes={}``)
reach the rules as plain tensors.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import named_axes as nx
import named_axes._dispatch as D
from named_axes._errors import AxisSizeError
from named_axes._tensor import NamedTensor

from conftest import check_op, const, real

SIZES = {"i": 2, "j": 3, "k": 4}


def _named(full, names):
    return nx.named(full, dict(enumerate(names))) if names else full


def _loop(fn, fulls, names_of, U):
    outs = []
    for idx in itertools.product(*[range(SIZES[n]) for n in U]):
        at = dict(zip(U, idx))
        outs.append(fn(*[f[tuple(at[n] for n in ns)] if ns else f
                         for f, ns in zip(fulls, names_of)]))
    return torch.stack(outs).reshape(tuple(SIZES[n] for n in U) + tuple(outs[0].shape))


def _union(*names_of):
    U = []
    for ns in names_of:
        U += [n for n in ns if n not in U]
    return U


NAME_SETS = [(), ("i",), ("j", "i"), ("i", "k"), ("k", "j", "i")]
SHAPES = [((5,), (5,)), ((5,), (5, 6)), ((4, 5), (5,)), ((4, 5), (5, 6)),
          ((3, 4, 5), (5, 6)), ((4, 5), (2, 5, 6)), ((3, 4, 5), (3, 5, 6)),
          ((1, 4, 5), (3, 5, 6)), ((2, 1, 4, 5), (3, 5, 6)), ((5,), (2, 5, 6))]


@pytest.mark.parametrize("sa, sb", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("na, nb", [(a, b) for a in NAME_SETS for b in NAME_SETS if a or b],
                         ids=lambda n: "".join(n) or "plain")
def test_matmul_matches_loop(na, nb, sa, sb):
    g = torch.Generator().manual_seed(len(na) * 7 + len(nb) + len(sa) * 3 + len(sb))
    fa = torch.randn(tuple(SIZES[n] for n in na) + sa, generator=g, dtype=torch.float64)
    fb = torch.randn(tuple(SIZES[n] for n in nb) + sb, generator=g, dtype=torch.float64)
    U = _union(na, nb)
    want = _loop(torch.matmul, [fa, fb], [na, nb], U)
    got = _named(fa, na) @ _named(fb, nb)
    assert type(got) is NamedTensor and set(got.named_shape) == set(U)
    torch.testing.assert_close(nx.positional(got, U + [...]), want)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sa, sb", [((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                                    ((5, 2, 3), (3, 4)), ((1, 2, 3), (5, 3, 4)), ((3,), (3,))])
def test_matmul_random_layouts(sa, sb, seed):
    # random physical orders of the named dims and random name sets per operand
    check_op(torch.matmul, [real(*sa), real(*sb)], key=f"mm-{sa}-{sb}-{seed}")


@pytest.mark.parametrize("fn, sa, sb", [(torch.mm, (2, 3), (3, 4)), (torch.bmm, (5, 2, 3), (5, 3, 4)),
                                        (torch.mv, (2, 3), (3,)), (torch.dot, (3,), (3,)),
                                        (lambda a, b: b.__rmatmul__(a), (2, 3), (3, 4))])
@pytest.mark.parametrize("seed", range(4))
def test_matmul_family_named_both_sides(fn, sa, sb, seed):
    check_op(fn, [real(*sa), real(*sb)], key=f"fam-{sa}-{sb}-{seed}", min_axes=2)


@pytest.mark.parametrize("sa, sb, named", [((2, 3), (4, 3, 5), [0]), ((3,), (4, 3, 5), [0]),
                                           ((4, 2, 3), (3,), [1]), ((2, 3), (3,), [1])])
def test_one_side_named_other_batched(sa, sb, named):
    # the plain operand has more positional dims than the named one: the folded path
    plain = 1 - named[0]
    makers = [real(*sa), real(*sb)]
    shape = (sa, sb)[plain]
    makers[plain] = const(torch.rand(shape, dtype=torch.float64))
    check_op(torch.matmul, makers, key=f"one-{sa}-{sb}", named=named)


@pytest.mark.parametrize("na, nb, sa, sb", [(("i", "j"), ("k",), (5,), (5, 6)),
                                            (("i", "j"), ("j", "k"), (4, 5), (5, 6)),
                                            (("i",), ("i",), (5,), (5,)),
                                            (("i",), (), (3, 4, 5), (3, 5, 6)),
                                            ((), ("k",), (4, 5), (5,))])
def test_matmul_gradients(na, nb, sa, sb):
    g = torch.Generator().manual_seed(0)
    fa = torch.randn(tuple(SIZES[n] for n in na) + sa, generator=g, dtype=torch.float64)
    fb = torch.randn(tuple(SIZES[n] for n in nb) + sb, generator=g, dtype=torch.float64)
    U = _union(na, nb)
    ra, rb = fa.clone().requires_grad_(), fb.clone().requires_grad_()
    want = _loop(torch.matmul, [ra, rb], [na, nb], U)
    wt = torch.randn(want.shape, generator=g, dtype=torch.float64)
    (want * wt).sum().backward()
    xa, xb = fa.clone().requires_grad_(), fb.clone().requires_grad_()
    got = nx.positional(_named(xa, na) @ _named(xb, nb), U + [...])
    (got * wt).sum().backward()
    torch.testing.assert_close(xa.grad, ra.grad)
    torch.testing.assert_close(xb.grad, rb.grad)


class _Largest(TorchDispatchMode):
    """Records the largest tensor any aten op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor) and o.untyped_storage().nbytes():
                self.largest = max(self.largest, o.untyped_storage().nbytes() // o.element_size())
        return out


def test_matmul_never_expands_the_weight():
    # h: {b, s} (D,), w: {h} (D, K): torch's broadcasting matmul would copy w b*s times
    h = nx.named(torch.randn(6, 7, 16, requires_grad=True), {0: "b", 1: "s"})
    w = nx.named(torch.randn(16, 5, 8, requires_grad=True), {1: "h"})
    o = nx.named(torch.randn(6, 7, 5, 8), {0: "b", 1: "s", 2: "h"})
    wo = nx.named(torch.randn(5, 8, 16), {0: "h"})
    with _Largest() as m:
        q = h @ w
        y = o @ wo
        (q.sum() + y.sum()).sum(("b", "s", "h")).backward()
    assert q.named_shape == {"b": 6, "s": 7, "h": 5} and tuple(q.shape) == (8,)
    assert y.named_shape == {"b": 6, "s": 7, "h": 5} and tuple(y.shape) == (16,)
    assert m.largest <= 6 * 7 * 5 * 16


def test_shared_name_size_mismatch_is_an_axis_error():
    a = nx.named(torch.randn(2, 3), {0: "i"})
    b = nx.named(torch.randn(4, 3, 2), {0: "i"})
    with pytest.raises(AxisSizeError, match="inconsistent sizes for axis 'i'"):
        a @ b


# -- NamedTensors without names --------------------------------------------------------

@pytest.fixture
def fallbacks(monkeypatch):
    calls = []
    orig = D.vmap_fallback

    def counting(func, args, kwargs):
        calls.append(D.op_name(func))
        return orig(func, args, kwargs)
    monkeypatch.setattr(D, "vmap_fallback", counting)
    return calls


def test_unnamed_inputs_take_the_fast_paths(fallbacks):
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    g, b, w = (torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64),
               torch.randn(8, 5, dtype=torch.float64))

    def block(x, g, b, w):
        h = F.layer_norm(x, (8,), g, b)
        return F.linear(h, w.mT) + h @ w + (w.mT @ h.mT).mT

    f = nx.xmap(block, in_axes=(["b", ...], {}, {}, {}), out_axes=["b", ...])
    got = f(x, g, b, w)
    assert fallbacks == []
    want = torch.stack([block(x[i], g, b, w) for i in range(3)])
    torch.testing.assert_close(got, want)


def test_unnamed_values_alone_give_plain_tensors():
    w = NamedTensor._wrap(torch.randn(3, 3), ())
    out = w @ w
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, w._data @ w._data)


def test_inplace_target_without_names_still_refuses_named_values():
    acc = NamedTensor._wrap(torch.zeros(3), ())
    x = nx.named(torch.ones(2, 3), {0: "i"})
    with pytest.raises(AxisSizeError, match="in-place update"):
        acc.add_(x)
    y = nx.named(torch.ones(2, 3), {0: "i"})
    assert y.add_(acc) is y


@pytest.mark.usefixtures("dynamo_matmul")
def test_folded_matmul_compiles_fullgraph():
    torch._dynamo.reset()
    # one pytree argument (a {i, j} @ b {j, k}: a shared name and one of each side's own)
    f = nx.xmap(lambda d: (d["a"] @ d["b"]).relu() @ d["c"],
                in_axes=({"a": ["i", "j", ...], "b": ["j", "k", ...], "c": {}},),
                out_axes=["i", "j", "k", ...])
    d = {"a": torch.randn(2, 3, 4, 5), "b": torch.randn(3, 4, 5, 6), "c": torch.randn(6, 2)}
    got = torch.compile(f, fullgraph=True, backend="eager")(d)
    want = torch.stack([torch.stack([torch.stack(
        [(d["a"][i, j] @ d["b"][j, k]).relu() @ d["c"] for k in range(4)]) for j in range(3)])
        for i in range(2)])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(f(d), want)
