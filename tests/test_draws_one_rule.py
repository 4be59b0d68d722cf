"""One rule decides whether an op draws random numbers (``_draws.draws``): torch's tag
``nondeterministic_seeded`` where torch has an aten op, a short name list only for the
Python functions that draw with no aten op of their name.  Was: two rules, a list of 38
names (nx.vmap's randomness, drawing on the whole under an engine, the RandomnessError
refusal) and the tag (the engine's watch of the random state); ops torch tags that the
list lacked (``torch.dropout_``, ``torch.feature_dropout_``) drew silently under nx.vmap's
default ``randomness='error'``, which torch.func.vmap refuses.

And nx.vmap's randomness handler (one TorchFunctionMode per call) runs each op on named
values inside its handler, where torch has popped the mode, so the library's own torch
calls pass unseen: a body that never draws pays one handler call per op on named values.
Was: every torch call the library made for those ops went through the handler too (17
calls for a 7-op body)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx
from named_axes._draws import draws, may_draw
from named_axes.transforms import _randomness

# the names of the list the tag replaces: each spelling torch has must stay a random op
OLD = """rand randn randint randperm rand_like randn_like randint_like
bernoulli bernoulli_ normal normal_ uniform_ exponential_ geometric_ log_normal_ cauchy_
random_ poisson multinomial binomial dropout alpha_dropout feature_alpha_dropout dropout1d
dropout2d dropout3d feature_dropout rrelu rrelu_ native_dropout gumbel_softmax
fractional_max_pool2d fractional_max_pool3d fractional_max_pool2d_with_indices
fractional_max_pool3d_with_indices _standard_gamma _sample_dirichlet""".split()
SPELLINGS = [(where, name, getattr(mod, name)) for name in OLD
             for where, mod in (("torch", torch), ("Tensor", torch.Tensor), ("F", F),
                                ("init", torch.nn.init)) if hasattr(mod, name)]


@pytest.mark.parametrize("where,name,func", SPELLINGS, ids=[f"{w}.{n}" for w, n, _ in SPELLINGS])
def test_every_op_the_name_list_held_is_a_random_op(where, name, func):
    assert draws(func) is True and may_draw(func)


def test_every_name_has_a_spelling():
    assert {n for _, n, _ in SPELLINGS} == set(OLD)


@pytest.mark.parametrize("func,want", [
    (torch.ops.aten.randn.default, True),
    (torch.ops.aten.bernoulli, True),
    (torch.ops.aten.add.Tensor, False),
    (torch.dropout_, True),            # tagged; the list lacked it
    (torch.feature_dropout_, True),
    # tagged for a dropout option only: may draw (watched), not a random op
    (F.scaled_dot_product_attention, None),
    (torch.ops.aten.scaled_dot_product_attention.default, None),
    (torch.lstm, None),
    (torch.gru, None),
    (F.relu, None),                    # Python code: may call a random op
    (torch.add, False),
    (torch.mean, False),
    (torch.Tensor.__mul__, False),
    (torch.Tensor.__pow__, False),
])
def test_the_tag_decides(func, want):
    assert draws(func) is want
    assert may_draw(func) is (want is not False)


X = torch.rand(4, 3)


@pytest.mark.parametrize("body", [
    lambda r: r + torch.dropout_(torch.ones(3), 0.5, True),
    lambda r: r + torch.feature_dropout_(torch.ones(2, 3), 0.5, True).sum(0),
], ids=["dropout_", "feature_dropout_"])
def test_a_tagged_draw_the_list_lacked_is_refused_under_error(body):
    with pytest.raises(RuntimeError):   # (torch.func.vmap refuses it)
        torch.func.vmap(body, randomness="error")(X)
    with pytest.raises((nx.RandomnessError, nx.AxisSizeError)):   # was: drew silently
        nx.vmap(body, axis_name="i")(X)


def test_a_body_that_never_draws_pays_one_handler_call_per_named_op(monkeypatch):
    calls = []
    handler = _randomness.Draws.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        calls.append(func)
        return handler(self, func, types, args, kwargs)
    monkeypatch.setattr(_randomness.Draws, "__torch_function__", counted)
    body = lambda r: (r * 2 + 1).sin().exp().sum() - r.mean()   # noqa: E731  (7 ops)
    f = nx.vmap(body, axis_name="i")
    f(X)
    calls.clear()
    out = f(X)
    assert len(calls) == 7, calls
    torch.testing.assert_close(out, torch.func.vmap(body)(X))


class _Logging(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", ["different", "same"])
def test_a_mode_of_the_users_inside_the_body_keeps_the_draws(mode):
    def body(r):
        with _Logging() as log:
            out = F.dropout(r + 1, 0.5) * torch.randn(3) + (r * 2).sin()
        assert log.seen > 0
        return out
    torch.manual_seed(0)
    want = torch.func.vmap(body, randomness=mode)(X)
    torch.manual_seed(0)
    got = nx.vmap(body, randomness=mode, axis_name="i")(X)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(nx.RandomnessError):
        nx.vmap(body, axis_name="i")(X)


def test_named_ops_with_torch_functions_disabled_still_run():
    def body(r):
        with torch._C.DisableTorchFunction():   # noqa: SLF001  (a user's choice)
            return r.sin() * 2
    torch.testing.assert_close(nx.vmap(body, axis_name="i")(X), X.sin() * 2)
