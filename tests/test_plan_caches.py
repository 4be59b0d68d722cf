"""The cached einsum / pdot plans and the eager (plain-op) path of the nx.lax collectives.

A plan is keyed by the spec and the operands' names and ranks; each call re-checks the
sizes.  A warm cache must give the same results and the same errors as a cold one, and
the eager collectives must agree with the registered ops that graphs show.
"""
from __future__ import annotations

import re

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import named_axes as nx
from named_axes.lax import _ops


def _r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _nt(*shape):
    return nx.named(_r(*shape), 'b ...')


def _error(fn, cold: bool):
    if cold:
        nx.clear_caches()
    with pytest.raises(Exception) as e:
        fn()
    return type(e.value), str(e.value)


@pytest.mark.parametrize("good, bad", [
    # a named axis with two sizes
    (lambda: nx.einsum('n{b},m{b}->nm{b}', _nt(2, 3), _nt(2, 5)),
     lambda: nx.einsum('n{b},m{b}->nm{b}', _nt(2, 3), _nt(4, 5))),
    # a positional letter with two sizes (1 broadcasts)
    (lambda: nx.einsum('n{b},n{b}->{b}', _nt(2, 3), _nt(2, 1)),
     lambda: nx.einsum('n{b},n{b}->{b}', _nt(2, 3), _nt(2, 5))),
    # pdot: positional pair sizes, then a named axis with two sizes
    (lambda: nx.lax.pdot(nx.named(_r(2, 3), 'k ...'), nx.named(_r(2, 3), 'k ...'), 'k',
                         pos_contract=((0,), (0,))),
     lambda: nx.lax.pdot(nx.named(_r(2, 3), 'k ...'), nx.named(_r(2, 4), 'k ...'), 'k',
                         pos_contract=((0,), (0,)))),
    (lambda: nx.lax.pdot(nx.named(_r(2, 3), 'k ...'), nx.named(_r(2, 4), 'k ...'), 'k'),
     lambda: nx.lax.pdot(nx.named(_r(2, 3), 'k ...'), nx.named(_r(5, 4), 'k ...'), 'k')),
])
def test_warm_cache_raises_what_a_cold_one_does(good, bad):
    cold = _error(bad, cold=True)
    good()
    assert _error(bad, cold=False) == cold


def test_einsum_cached_plan_follows_the_bound_size_of_a_replicated_name():
    for j in (3, 5, 3):
        two = torch.tensor(2.0, dtype=torch.float64)
        out = nx.xmap(lambda x: nx.einsum('n{i},{j}->n{j,i}', x, two),
                      in_axes=['i', ...], out_axes=['j', 'i', ...], axis_sizes={'j': j})(_r(2, 4))
        torch.testing.assert_close(out, 2 * _r(2, 4)[None].expand(j, 2, 4))
        out = nx.xmap(lambda x: nx.einsum('n{j}->n', x), in_axes={}, out_axes=[...],
                      axis_sizes={'j': j})(torch.ones(2))
        torch.testing.assert_close(out, torch.full((2,), float(j)))


def test_einsum_cached_plan_unbound_after_bound():
    f = nx.xmap(lambda x: nx.einsum('n{j}->n', x), in_axes={}, out_axes=[...], axis_sizes={'j': 2})
    f(torch.ones(2))
    with pytest.raises(nx.UnboundAxisError, match="axis 'j' is listed but no operand carries it"):
        nx.einsum('n{j}->n', nx.named(torch.ones(2), '...'))


def test_einsum_ellipsis_and_output_name_order():
    x, y = nx.named(_r(2, 3, 4, 5), 'a b ...'), nx.named(_r(3, 5, seed=1), 'b ...')
    for _ in range(2):
        out = nx.einsum('...k{a,b},k{b}->...{b,a}', x, y)
        ref = torch.einsum('abnk,bk->ban', _r(2, 3, 4, 5), _r(3, 5, seed=1))
        assert out.named_shape == {'b': 3, 'a': 2}
        torch.testing.assert_close(nx.positional(out, 'b a ...'), ref)


def test_pdot_cached_plan_scales_by_the_current_bound_size():
    for k in (2, 3):
        f = nx.xmap(lambda x, y: nx.lax.pdot(x, y, ('i', 'k')), in_axes=(['i', ...], ['i', ...]),
                    out_axes=[...], axis_sizes={'k': k})
        out = f(torch.ones(4, 2), torch.ones(4, 2))
        torch.testing.assert_close(out, torch.full((2, 2), 4.0 * k))


KINDS = {
    "psum": lambda x: nx.lax.psum(x, 'i'),
    "pmean": lambda x: nx.lax.pmean(x, 'i'),
    "pmax": lambda x: nx.lax.pmax(x, 'i'),
    "pmin": lambda x: nx.lax.pmin(x, 'i'),
    "pdot": lambda x: nx.lax.pdot(x, x * 2, 'i'),
    "all_gather": lambda x: nx.lax.all_gather(x, 'i', axis=1).sum(0),
    "all_to_all": lambda x: nx.lax.all_to_all(x, 'i', 0, 0),
    "psum_scatter": lambda x: nx.lax.psum_scatter(x, 'i'),
    "ppermute": lambda x: nx.lax.ppermute(x, 'i', [(0, 1), (1, 2), (2, 0)]),
    "axis_index": lambda x: x * nx.lax.axis_index('i'),
}
KEEPS_I = {"all_to_all", "psum_scatter", "ppermute", "axis_index"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_eager_plain_path_equals_the_registered_op(kind, monkeypatch):
    f = nx.xmap(KINDS[kind], in_axes=['i', ...],
                out_axes=['i', ...] if kind in KEEPS_I else [...])

    def value_and_grad(x):
        x = x.clone().requires_grad_()
        y = f(x)
        (g,) = torch.autograd.grad((y * torch.arange(1, y.numel() + 1).reshape(y.shape)).sum(), x)
        return y, g

    x = _r(3, 3)
    eager = value_and_grad(x)
    monkeypatch.setattr(_ops, "_tracing", lambda: True)   # force the custom ops
    registered = value_and_grad(x)
    torch.testing.assert_close(eager, registered)


def test_graphs_and_dispatch_modes_still_see_the_registered_op():
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(str(func))
            return func(*args, **(kwargs or {}))

    f = nx.xmap(lambda x: nx.lax.psum(x, 'i'), in_axes=['i', ...], out_axes=[...])
    x = torch.randn(3, 2)
    with Log():
        f(x)
    assert any("named_axes.psum" in c for c in calls)
    assert re.search(r"named_axes\.psum", make_fx(f)(x).code)


def test_einsum2_matmul_lowering_matches_torch_einsum():
    import random

    from named_axes._einsum2 import einsum2_eager as einsum2

    rng = random.Random(0)
    for _ in range(300):
        tx = "".join(rng.sample("abcdef", rng.randint(0, 4)))
        ty = "".join(rng.sample("abcdef", rng.randint(0, 4)))
        out = "".join(c for c in sorted(set(tx) | set(ty), key=lambda _: rng.random())
                      if rng.random() < 0.6)
        eq, size = f"{tx},{ty}->{out}", {c: rng.randint(1, 4) for c in "abcdef"}
        x = torch.randn([size[c] for c in tx], dtype=torch.float64, requires_grad=True)
        y = torch.randn([size[c] for c in ty], dtype=torch.float64, requires_grad=True)
        ref, got = torch.einsum(eq, x, y), einsum2(eq, x, y)
        torch.testing.assert_close(got, ref)
        g = torch.randn_like(ref)
        torch.testing.assert_close(torch.autograd.grad(got, (x, y), g, allow_unused=True),
                                   torch.autograd.grad(ref, (x, y), g, allow_unused=True))
    # sizes that broadcast (1 against n) go to torch.einsum
    x, y = torch.randn(1, 3), torch.randn(4, 3)
    torch.testing.assert_close(einsum2("ab,ab->a", x, y), torch.einsum("ab,ab->a", x, y))


# -- the one cache policy (named_axes/_plancache.py) --------------------------------

def test_plan_cache_policy():
    from named_axes._plancache import PlanCache, clear_caches
    built = []

    def build(n):
        built.append(n)
        return None if n == 0 else n * n

    cache = PlanCache("test squares", build, maxsize=3, validate=lambda plan, n: n != 7)
    assert [cache(2), cache(2), cache(0), cache(0)] == [4, 4, None, None]
    assert built == [2, 0]                       # a None plan is a plan
    cache.plan([1], 3)                           # an unhashable key: built, not kept
    cache.plan([1], 3)
    assert built == [2, 0, 3, 3] and len(cache) == 2
    cache(7)                                     # the third plan: full
    cache(7)                                     # validate fails: rebuilt, starts over
    assert built[-2:] == [7, 7]
    assert len(cache) == 1 and cache.lookup((7,)) == 49 and cache.lookup((2,)) is None
    clear_caches()
    assert len(cache) == 0


def test_plan_cache_is_left_alone_while_dynamo_traces():
    from named_axes._plancache import PlanCache
    cache = PlanCache("test traced", lambda n: n + 1)

    @torch.compile(backend="eager", fullgraph=True)
    def f(x):
        return x * cache(2)

    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 3.))
    assert len(cache) == 0


def test_one_rule_per_function_and_every_rule_found_by_name():
    from named_axes import _dispatch, _registry
    with pytest.raises(ValueError, match="already has the rule"):
        _registry.register([torch.add], lambda func, args, kwargs: NotImplemented)
    # the index dynamo uses grows with every registration: torch.einsum's rule (made
    # after the tables) is found by name too
    for f, rec in _registry.RECORDS.items():
        assert _registry.rule_while_compiling(f) is rec.impl, f


def test_named_torch_einsum_under_torch_compile_uses_its_rule():
    x, w = nx.named(_r(4, 3), 'b ...'), _r(3, 2)
    f = torch.compile(lambda x, w: torch.einsum('k,kh->h', x, w), backend="eager")
    got = f(x, w)
    assert got.named_shape == {'b': 4}
    torch.testing.assert_close(nx.positional(got, 'b ...'), _r(4, 3) @ _r(3, 2))
