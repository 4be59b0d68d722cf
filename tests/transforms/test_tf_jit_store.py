"""nx.jit's program store (transforms/_store.py): a second process starts warm.

The store's promise is that a stored program is exactly what tracing would compile:
the record that names it pins down every operation, constant, shape and the result's
structure, and anything it cannot pin down is not stored.  Checked here: two processes
(the second loads the library without tracing, without importing dynamo, and agrees
with eager on new values), in-process reloads against the regular compile, generated
programs (equal records exactly when the programs do the same), and each kind of
program the store refuses, with its side effects undone.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import named_axes as nx
from named_axes.transforms import _store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not _store.available(), reason="torch without AOTInductor")


@pytest.fixture
def store(tmp_path):
    before = nx.set_program_store(tmp_path)
    try:
        yield tmp_path
    finally:
        _store.flush()
        nx.set_program_store(before)


def _named_loss(w1, w2, images, labels):
    hidden = torch.relu(nx.lax.pdot(images, w1, "inputs"))
    logits = nx.lax.pdot(hidden, w2, "hidden")
    predictions = logits - nx.logsumexp(logits, "classes")
    targets = nx.one_hot(labels, 4, dim="classes")
    return -nx.lax.pmean(nx.lax.psum(targets * predictions, "classes"), "batch")


IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
           ["batch", ...]]


def _step():
    return nx.jit(nx.value_and_grad(nx.xmap(_named_loss, in_axes=IN_AXES, out_axes=[...]),
                                    argnums=(0, 1)))


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.nn.Parameter(torch.randn(16, 8, generator=g)),
            torch.nn.Parameter(torch.randn(8, 4, generator=g)),
            torch.randn(6, 16, generator=g), torch.randint(0, 4, (6,), generator=g))


def _flat(out):
    value, (g1, g2) = out
    return [value.tolist(), g1.tolist(), g2.tolist()]


_CHILD = textwrap.dedent(r"""
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    import test_tf_jit_store as t
    step = t._step()
    out = [t._flat(step(*t._data(seed))) for seed in (0, 1, 2)]
    print(json.dumps({{"out": out, "stats": step.stats(),
                      "dynamo": "torch._dynamo" in sys.modules,
                      "inductor": "torch._inductor" in sys.modules}}))
""")


def _child(store_dir) -> dict:
    code = _CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=600,
                         env={**os.environ, _store.ENV: str(store_dir)})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_second_process_loads_the_program_without_tracing(tmp_path):
    first = _child(tmp_path)
    assert first["stats"]["store_saved"] == 1 and first["stats"]["store_loaded"] == 0
    assert len(list(tmp_path.glob("*.pt2"))) == 1   # saved when the first process exited
    second = _child(tmp_path)
    assert second["stats"]["store_loaded"] == 1 and second["stats"]["store_saved"] == 0
    assert not second["dynamo"] and not second["inductor"]   # nothing traced or compiled
    eager = nx.value_and_grad(nx.xmap(_named_loss, in_axes=IN_AXES, out_axes=[...]),
                              argnums=(0, 1))
    for seed, (a, b) in enumerate(zip(first["out"], second["out"])):
        want = _flat(eager(*_data(seed)))
        for x, y, z in zip(a, b, want):
            torch.testing.assert_close(torch.tensor(y), torch.tensor(z), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(torch.tensor(x), torch.tensor(z), rtol=1e-5, atol=1e-6)


def test_reloaded_program_matches_the_regular_compile(store):
    def f(x, y):
        z = (x.sin() * y).sum("b")
        return {"total": z.sum(), "per_b": x * 2.5, "n": 3}
    g = nx.xmap(f, in_axes=(["b", ...], [...]), out_axes={"total": [...], "per_b": ["b", ...],
                                                          "n": [...]})
    first = nx.jit(g)
    x, y = torch.randn(5, 3), torch.randn(3)
    want = first(x, y)
    _store.flush()
    assert first.stats()["store_saved"] == 1
    again = nx.jit(g)   # a new jit: nothing cached in-process
    results = []
    for seed in range(3):
        x, y = torch.randn(5, 3), torch.randn(3)
        got, want = again(x, y), first(x, y)
        assert got["n"] == 3
        torch.testing.assert_close(got["total"], want["total"])
        torch.testing.assert_close(got["per_b"], want["per_b"])
        results.append((got, {k: v.clone() for k, v in want.items() if k != "n"}))
    for got, want in results:   # each call's results are its own (no buffer reused)
        torch.testing.assert_close(got["per_b"], want["per_b"])
    assert again.stats()["store_loaded"] == 1 and again.stats()["compiled"] == 3


def test_closed_over_weights_are_inputs_of_the_stored_program(store):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))
    scale = torch.tensor(0.5)   # small: recorded by value too

    def loss(x):
        return (model(x) * scale).pow(2).mean()
    step = nx.value_and_grad(loss)   # grad with respect to x; the weights closed over
    x = torch.randn(8, 16)
    first = nx.jit(step)
    first(x)
    _store.flush()
    assert first.stats()["store_saved"] == 1
    again = nx.jit(step)
    for _ in range(2):
        got, want = again(x), step(x)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        with torch.no_grad():   # the stored program reads the weights on every call
            model[0].weight.mul_(1.5)
            scale.add_(0.25)
    assert again.stats()["store_loaded"] == 1
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))   # same shapes, its own weights
    elsewhere = nx.jit(nx.value_and_grad(lambda x: (other(x) * scale).pow(2).mean()))
    torch.testing.assert_close(elsewhere(x)[0], (other(x) * scale).pow(2).mean())
    scale.fill_(3.0)   # a small constant's value is part of the record: a new program
    third = nx.jit(step)
    torch.testing.assert_close(third(x)[1], step(x)[1])
    assert third.stats()["store_loaded"] == 0


def test_strided_inputs_and_a_damaged_library(store):
    def f(x):
        return (x.exp() * 2).sum(0)
    x = torch.randn(3, 4).t()   # strides (1, 4)
    want = f(x)
    nx.jit(f)(x)
    _store.flush()
    torch.testing.assert_close(nx.jit(f)(x), want)   # loaded, on the same strides
    torch.testing.assert_close(nx.jit(f)(x.contiguous()), want)   # another signature
    t = nx.named(torch.randn(2, 3), "b ...")   # named in, named out
    nx.jit(lambda t: t.exp() * 2)(t)
    _store.flush()
    out = nx.jit(lambda t: t.exp() * 2)(t)
    assert out.named_shape == {"b": 2}
    torch.testing.assert_close(out._data, t._data.exp() * 2)
    # a damaged library (one this process has not loaded: a loaded one stays mapped)
    def h(x):
        return (x.exp() * 3).sum(0)
    known = set(store.glob("*.pt2"))
    nx.jit(h)(x)
    _store.flush()
    (library,) = set(store.glob("*.pt2")) - known
    library.write_bytes(b"not a library")
    again = nx.jit(h)
    with pytest.warns(RuntimeWarning, match="does not load"):
        torch.testing.assert_close(again(x), h(x))   # compiled as usual
    assert again.stats()["store_loaded"] == 0


def _record(fun, *args):
    leaves = [a for a in args if isinstance(a, torch.Tensor)]
    ident = _store.identify(fun, args, leaves, ("key",))
    return None if ident is None else ident.digest


def test_records_tell_programs_apart():
    x = torch.randn(4, 3)
    assert _record(lambda x: x * 2.0, x) == _record(lambda x: x * 2.0, x)
    assert _record(lambda x: x * 2.0, x) != _record(lambda x: x * 3.0, x)
    assert _record(lambda x: x * 2.0, x) != _record(lambda x: x * 2.0, x.t().contiguous().t())
    assert _record(lambda x: x * 2.0, x) != _record(lambda x: x * 2.0, x[:3])
    assert _record(lambda x: (x * 2, x + 1), x) != _record(lambda x: [x * 2, x + 1], x)
    small, other = torch.tensor([1., 2., 3.]), torch.tensor([1., 2., 4.])
    assert _record(lambda x: x * small, x) != _record(lambda x: x * other, x)
    z = torch.randn(4, 3)
    assert _record(lambda x, y: x - y, x, z) != _record(lambda x, y: y - x, x, z)


_OPS = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b,
        lambda a, b: torch.maximum(a, b),
        lambda a, b: a.sin() + b, lambda a, b: (a * 0.5).exp() - b]


def _program(ops: list):
    def f(x, y):
        vals = [x, y]
        for op, i, j in ops:
            vals.append(_OPS[op](vals[i], vals[j]))
        return vals[-1]
    return f


@pytest.mark.parametrize("seed", range(4))
def test_generated_programs_share_a_record_exactly_when_they_do_the_same(seed):
    rng = random.Random(seed)

    def ops():
        n = rng.randint(1, 4)
        return [(rng.randrange(len(_OPS)), rng.randrange(k + 2), rng.randrange(k + 2))
                for k in range(n)]
    x, y = torch.randn(3, 2), torch.randn(3, 2)
    x2, y2 = torch.randn(3, 2), torch.randn(3, 2)
    programs = [ops() for _ in range(12)]
    programs += [list(p) for p in programs[:4]]   # some repeated
    digests = [_record(_program(p), x, y) for p in programs]
    for p, d in zip(programs, digests):
        assert d is not None
        for q, e in zip(programs, digests):
            if p == q:
                assert d == e
            if d == e:   # one record: the same function, on other values too
                assert _program(p)(x2, y2).equal(_program(q)(x2, y2))


def test_programs_the_store_refuses_and_side_effects_undone():
    x = torch.randn(4, 3)
    big = torch.randn(100)
    counter = torch.zeros(())
    assert _record(lambda x: x + torch.rand(3), x) is None              # random
    assert _record(lambda x: x * float(x.sum()), x) is None             # reads a value
    assert _record(lambda x: x * 2 if x.sum() > 0 else x * 3, x) is None
    assert _record(lambda x: x * torch.equal(x, x), x) is None
    assert _record(lambda x: x[x > 0] * 2, x) is None                   # value-shaped
    other = torch.randn(100)   # large closed-over tensors: recorded by spec (inputs)
    assert _record(lambda x: x * big[:3], x) == _record(lambda x: x * other[:3], x)
    assert _record(lambda x: x * big[:3], x) != _record(lambda x: x * big[1:4], x)
    sparse = big.to_sparse()
    assert _record(lambda x: x * sparse.to_dense()[:3], x) is None     # closes over sparse
    assert _record(lambda x: x, x) is None                              # returns its input
    assert _record(lambda x: (counter.add_(1), x * 2)[1], x) is None    # updates state
    assert float(counter) == 0.0                                        # ... undone
    y = x.clone()
    assert _record(lambda y: y.mul_(2), y) is None
    assert y.equal(x)
    assert _record(lambda y: y[1:].mul_(2).sum(), y) is None            # through a view
    assert _record(lambda y: y.t()[0].add_(1).sum(), y) is None         # of a view
    assert y.equal(x)
    assert _record(lambda x: (counter[()].add_(1), x * 2)[1], x) is None
    assert float(counter) == 0.0                                        # ... undone
    made = _record(lambda y: (lambda z: (z[1:].mul_(2), z)[1])(y * 1), y)
    assert made is not None and y.equal(x)       # writes only what it made: storable
    rng = torch.get_rng_state()
    _record(lambda x: x + torch.rand(3), x)
    assert torch.get_rng_state().equal(rng)                             # random state kept
    w = torch.nn.Parameter(torch.ones(3))
    _record(lambda x: (x * w).sum().backward(), x)
    assert w.grad is None                                               # .grad restored
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a non-leaf input: its .grad is not read
        assert _record(lambda y: y * 2, w * 3) is not None


def test_store_is_skipped_for_calls_it_cannot_serve(store):
    w = torch.nn.Parameter(torch.randn(3))
    f = nx.jit(lambda x: (x * w).sum())   # differentiable result: not values
    f(torch.randn(3)).backward()
    assert f.stats()["store_saved"] == 0 and w.grad is not None
    g = nx.jit(lambda x: x * 2, backend="eager")
    g(torch.randn(3))
    assert g.stats()["store_saved"] == 0
    assert not list(store.glob("*.pt2"))


def test_set_program_store_returns_the_previous_setting(tmp_path):
    before = nx.set_program_store(tmp_path)
    try:
        assert nx.set_program_store(None) == str(tmp_path)
        assert _store.program_store() is None
    finally:
        nx.set_program_store(before)


def test_a_program_without_arguments_is_stored_with_its_closed_over_weights(store):
    w = torch.randn(64, 32)

    def f():
        return nx.xmap(lambda r: r.sum() * 2.0, in_axes=[["row", ...]], out_axes=["row", ...])(w)
    first = nx.jit(f)
    torch.testing.assert_close(first(), w.sum(1) * 2.0)
    _store.flush()
    assert first.stats()["store_saved"] == 1
    again = nx.jit(f)
    for _ in range(2):
        torch.testing.assert_close(again(), w.sum(1) * 2.0)
        with torch.no_grad():
            w.mul_(3.0)   # the stored program reads the weights on every call
    assert again.stats()["store_loaded"] == 1
