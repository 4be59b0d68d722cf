"""The dispatcher: errors name the op and the shapes; fast paths stay off vmap; the
fallback handles ops no table lists (including ones functorch cannot batch)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx

# torch.nn.GRU itself: importing torch_xla swaps nn.GRU for its scan-based ScanGRU
_GRU = torch.nn.modules.rnn.GRU
from named_axes import _dispatch

torch.manual_seed(0)


def test_inconsistent_axis_sizes_name_axis_sizes_and_arguments():
    x = nx.named(torch.rand(5, 3), {0: "i"})
    y = nx.named(torch.rand(7, 3), {0: "i"})
    with pytest.raises(nx.AxisSizeError, match=r"inconsistent sizes for axis 'i': 5 \(args\[0\]\) vs 7 \(args\[1\]\)"):
        x + y
    with pytest.raises(ValueError, match=r"torch.cat: inconsistent sizes for axis 'i': 5 .* vs 7"):
        torch.cat([x, y])
    with pytest.raises(ValueError, match=r"axis 'i': 5 .* vs 7"):
        torch.atan2(x, y)


@pytest.mark.parametrize("call, op", [
    (lambda x: x + torch.rand(4), r"Tensor.__add__|torch.add"),
    (lambda x: torch.mul(x, torch.rand(4)), r"torch.mul"),
    (lambda x: x @ torch.rand(4, 2), r"matmul"),
    (lambda x: torch.mm(x.unsqueeze(0), torch.rand(4, 2)), r"torch.mm"),
    (lambda x: F.linear(x, torch.rand(2, 4)), r"F.linear"),
    (lambda x: F.layer_norm(x, (4,)), r"F.layer_norm"),
    (lambda x: torch.cross(x, torch.rand(4), dim=0), r"torch.cross"),
    (lambda x: x.view(5), r"Tensor.view"),
])
def test_positional_errors_inside_ops_name_the_op_and_shapes(call, op):
    x = nx.named(torch.rand(2, 3), {0: "batch"})
    with pytest.raises(RuntimeError, match=op) as info:
        call(x)
    msg = str(info.value)
    assert "positional shape (" in msg and "{'batch': 2}" in msg and "\nfix: " in msg, msg
    assert isinstance(info.value, nx.ShapeError) and isinstance(info.value, ValueError)


def test_shape_ops_reject_names():
    x = nx.named(torch.rand(2, 3, 4), {0: "b"})
    with pytest.raises(ValueError, match=r"Tensor.transpose: 'b' is not a positional dimension"):
        x.transpose("b", 0)
    with pytest.raises(ValueError, match="named axis 'b' can't be used here"):
        x.narrow("b", 0, 1)


FAST = [
    ("add", lambda x, y, w: x + y * 2.0),
    ("sum-name", lambda x, y, w: x.sum("b")),
    ("sum-int", lambda x, y, w: y.sum(0)),
    ("matmul", lambda x, y, w: x @ w),
    ("linear", lambda x, y, w: F.linear(x, w.T)),
    ("softmax", lambda x, y, w: F.softmax(y, -1)),
    ("log_softmax-name", lambda x, y, w: x.log_softmax("b")),
    ("layer_norm", lambda x, y, w: F.layer_norm(x, (3,))),
    ("cross_entropy", lambda x, y, w: F.cross_entropy(y, torch.tensor([0, 2, 1]))),
    ("embedding", lambda x, y, w: F.embedding(nx.named(torch.tensor([1, 0]), {0: "b"}), w)),
    ("dropout", lambda x, y, w: F.dropout(x, 0.5)),
    ("reshape", lambda x, y, w: y.reshape(-1).transpose(0, 0)),
    ("getitem", lambda x, y, w: y[:, 1]),
    ("cat", lambda x, y, w: torch.cat([x, x], -1)),
    ("relu", lambda x, y, w: torch.relu(x)),
    ("where", lambda x, y, w: torch.where(x > 0, x, 0.0)),
]


@pytest.mark.parametrize("name, fn", FAST, ids=[n for n, _ in FAST])
def test_fast_paths_do_not_use_vmap(name, fn, monkeypatch):
    x = nx.named(torch.rand(2, 3), {0: "b"})
    y = nx.named(torch.rand(2, 3, 3), {0: "c"})
    w = torch.rand(3, 3)

    def boom(*a, **k):
        raise AssertionError(f"{name} went through the vmap fallback")
    monkeypatch.setattr(_dispatch, "vmap_fallback", boom)
    out = fn(x, y, w)
    # a result with no named axis left is a plain tensor (x.sum("b"))
    assert isinstance(out, nx.NamedTensor) or name == "sum-name" and type(out) is torch.Tensor


def test_fallback_handles_ops_without_rules_and_non_tensor_outputs():
    x = nx.named(torch.rand(2, 3, 3, dtype=torch.float64), {0: "b"})
    mha = torch.nn.MultiheadAttention(3, 1, batch_first=True).double().eval()
    out, weights = mha(x, x, x, need_weights=False)
    assert weights is None and out.named_shape == {"b": 2}
    ref = torch.stack([mha(t, t, t, need_weights=False)[0] for t in nx.positional(x, {0: "b"})])
    torch.testing.assert_close(nx.positional(out, {0: "b"}), ref)


def test_fallback_loops_where_functorch_has_no_batching_rule():
    gru = _GRU(3, 2, batch_first=True).double()
    x = nx.named(torch.rand(2, 4, 5, 3, dtype=torch.float64), {0: "b"})
    out, h = gru(x)
    ref = [gru(t) for t in nx.positional(x, {0: "b"})]
    torch.testing.assert_close(nx.positional(out, {0: "b"}), torch.stack([r[0] for r in ref]))
    torch.testing.assert_close(nx.positional(h, {0: "b"}), torch.stack([r[1] for r in ref]))


def test_loss_with_value_checks_matches_per_index_loop():
    # gaussian_nll_loss checks the values of var (torch.any(var < 0)) before computing
    x = nx.named(torch.tensor([[1.0, 2.0], [-3.0, -4.0]]), {0: "b"})
    var = nx.named(torch.rand(2, 2) + 0.5, {0: "b"})
    out = F.gaussian_nll_loss(x, torch.zeros(2), var)
    ref = torch.stack([F.gaussian_nll_loss(a, torch.zeros(2), v)
                       for a, v in zip(nx.positional(x, {0: "b"}), nx.positional(var, {0: "b"}))])
    torch.testing.assert_close(nx.positional(out, {0: "b"}), ref)


def test_op_names_are_spelled_as_users_write_them():
    from named_axes._registry import op_name
    assert op_name(torch.add) == "torch.add"
    assert op_name(torch.Tensor.sum) == "Tensor.sum"
    assert op_name(F.softmax) == "F.softmax"


def test_every_table_entry_has_a_rule():
    from named_axes._registry import RECORDS
    from named_axes.rules import pointwise

    for names, arity in ((pointwise.UNARY_POINTWISE, 1), (pointwise.BINARY_POINTWISE, 2)):
        for name in names:
            spelled = [f for f in (getattr(torch, name, None), getattr(torch.Tensor, name, None),
                                   getattr(F, name, None), getattr(torch.special, name, None))
                       if f is not None]
            assert spelled, name
            assert all(RECORDS[f].kind == "pointwise" and RECORDS[f].arity == arity
                       for f in spelled), name


NO_NAMES_LEFT = {
    "method-sum": lambda x: x.sum("b"),
    "nx.sum": lambda x: nx.sum(x, "b"),
    "mean-tuple": lambda x: x.mean(("b", 0)),
    "max": lambda x: x.max("b"),
    "argmax": lambda x: x.argmax("b"),
    "logsumexp": lambda x: nx.logsumexp(x, "b"),
    "norm": lambda x: nx.norm(x, dim="b"),
    "matmul": lambda x: nx.positional(x, ["b", ...]).T @ nx.positional(x, ["b", ...]),
    "einsum": lambda x: nx.einsum("{b}i,{b}i->i", x, x),
    "psum": lambda x: nx.xmap(lambda v: nx.lax.psum(v, "b"), in_axes=["b", ...],
                              out_axes=[...])(nx.positional(x, ["b", ...])),
    "unnamed-operands": lambda x: x.sum("b") * 2 + torch.ones(3),
}


@pytest.mark.parametrize("name", list(NO_NAMES_LEFT))
def test_a_result_with_no_named_axis_is_a_plain_tensor(name):
    """One convention (docs/guide.md §1): no named axis left -> torch.Tensor."""
    x = nx.named(torch.randn(4, 3), {0: "b"})
    out = NO_NAMES_LEFT[name](x)
    for o in (out if isinstance(out, tuple) else (out,)):
        assert type(o) is torch.Tensor, (name, type(o))
