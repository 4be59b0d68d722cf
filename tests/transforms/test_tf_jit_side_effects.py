"""nx.jit refuses the Python side effects a compiled program cannot replay (they used to
train silently wrongly): an optimizer step inside the program (its state was created
once, as tracing placeholders, and its step count baked in) and ``loss.backward()``
inside it (each ``.grad`` was set once, to a placeholder).  The errors leave the
parameters and the optimizer as they were, and the recommended forms train like eager."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def _named_loss(lin):
    return nx.xmap(lambda x: lin(x).tanh().sum(), in_axes=["b", ...], out_axes=["b", ...])


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.Adam(ps, lr=1e-2),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.SGD(ps, lr=0.1),
])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_optimizer_step_inside_jit_is_refused_and_leaves_no_trace(make_opt, backend):
    lin = _model()
    opt = make_opt(lin.parameters())
    f = _named_loss(lin)

    def step(x):
        opt.zero_grad()
        loss = f(x).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    x = torch.randn(5, 4)
    before = [p.detach().clone() for p in lin.parameters()]
    with pytest.raises(nx.NamedAxisError, match=r"jit\(step\): the program calls .*\.step\(\)"):
        nx.jit(step, backend=backend)(x)
    assert all(p.grad is None for p in lin.parameters()) and not opt.state
    for p, b in zip(lin.parameters(), before):
        assert torch.equal(p.detach(), b)
    # the optimizer works eagerly afterwards (the refusal hook is gone)
    step(x)
    assert all(type(p.grad) is torch.Tensor for p in lin.parameters())


@pytest.mark.parametrize("as_argument", [False, True])
def test_backward_inside_jit_is_refused_and_grads_reset(as_argument):
    lin = _model()
    x = torch.randn(5, 4)
    if as_argument:
        def step(w, b, x):
            loss = torch.nn.functional.linear(x, w, b).tanh().sum()
            loss.backward()
            return loss.detach()
        args = (lin.weight, lin.bias, x)
    else:
        def step(x):
            loss = lin(x).tanh().sum()
            loss.backward()
            return loss.detach()
        args = (x,)
    with pytest.raises(nx.NamedAxisError, match=r"calls \.backward\(\): it set the \.grad of 2"):
        nx.jit(step, backend="eager")(*args)
    assert all(p.grad is None for p in lin.parameters())


def test_an_input_that_already_has_a_grad_is_no_backward():
    """A parameter whose .grad a step outside left (zero_grad(set_to_none=False)) traces
    as it is: its .grad is not the program's doing."""
    lin = _model()
    x = torch.randn(5, 4)
    lin(x).sum().backward()
    kept = [p.grad.clone() for p in lin.parameters()]
    loss = nx.jit(lambda w, b, x: torch.nn.functional.linear(x, w, b).tanh().sum(),
                  backend="eager")
    out = loss(lin.weight, lin.bias, x)
    torch.testing.assert_close(out, lin(x).tanh().sum())
    assert all(torch.equal(p.grad, k) for p, k in zip(lin.parameters(), kept))


def test_recommended_forms_train_like_eager():
    """Compiled loss with .backward() and opt.step() outside; and a functional step."""
    ref, lin = _model(), _model()
    ropt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt = torch.optim.Adam(lin.parameters(), lr=1e-2)
    loss = nx.jit(_named_loss(lin))
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(5, 4, generator=g)
        ropt.zero_grad(); _named_loss(ref)(x).sum().backward(); ropt.step()
        opt.zero_grad(); loss(x).sum().backward(); opt.step()
    for a, b in zip(lin.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b)
    assert loss.cache_size() == 1 and loss.stats()["inline"] == 0


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_closed_over_counters_advance_once_per_call(backend):
    """make_fx runs ops on one-element real constants for real, in-place ones included:
    the trace advanced BatchNorm's num_batches_tracked (and any closed-over counter)
    before the compiled program did it again (twice on the first call)."""
    bn, ref = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    counter = torch.zeros((), dtype=torch.int64)

    def program(x):
        counter.add_(1)
        return bn(x).sum() + counter

    f = nx.jit(program, backend=backend)
    g = torch.Generator().manual_seed(0)
    for i in range(1, 4):
        x = torch.randn(8, 3, generator=g)
        with torch.no_grad():
            out = f(x)
            expected = ref(x).sum() + i
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        assert int(counter) == i and int(bn.num_batches_tracked) == i
        torch.testing.assert_close(bn.running_mean, ref.running_mean)
        torch.testing.assert_close(bn.running_var, ref.running_var)


def test_a_counter_read_as_a_number_is_refused():
    """BatchNorm with momentum=None divides by float(num_batches_tracked): the trace
    baked 1.0 in, and every compiled call took the last batch's mean as the average."""
    bn = torch.nn.BatchNorm1d(3, momentum=None)
    f = nx.jit(lambda x: bn(x).sum(), backend="eager")
    with pytest.raises(nx.NamedAxisError, match=r"updates a closed-over torch.int64 tensor of "
                                                r"shape \(\) in place and reads it as a Python"):
        with torch.no_grad():
            f(torch.randn(8, 3))
    assert int(bn.num_batches_tracked) == 0          # the trace's update was undone
    step = torch.zeros(())
    g = nx.jit(lambda x: x * float(step), backend="eager")   # read, never updated: a constant
    torch.testing.assert_close(g(torch.ones(2)), torch.zeros(2))


@nx.custom_vjp
def _f_psum(x):
    return x


_f_psum.defvjp(lambda x: (_f_psum(x), None), lambda _, g: (nx.lax.psum(g, "shard"),))


def test_warm_up_call_does_not_advance_closed_over_state():
    """When a gradient inside decides a named shape by value, nx.jit runs the program
    once eagerly (on copies of its arguments) before tracing again; that call also
    advanced closed-over state: a counter stood at 2 after the first call."""
    counter = torch.zeros((), dtype=torch.int64)

    def program(w, e, x):
        counter.add_(1)

        def loss(w, e):   # e: replicated, its gradient per instance until folded
            return (torch.tanh(_f_psum(x * e) @ w) ** 2).mean()
        value, grads = nx.value_and_grad(loss, argnums=(0, 1))(w, e)
        return nx.lax.pmean(value, "batch"), [nx.lax.pmean(g, "batch") for g in grads]

    f = nx.xmap(program, in_axes=(["shard", ...], [...], ["batch", ...]),
                out_axes=(["shard", ...], [["shard", ...], [...]]))
    g = torch.Generator().manual_seed(0)
    w, e = torch.randn(2, 4, 3, generator=g), torch.randn(4, generator=g)
    x = torch.randn(2, 5, 4, generator=g)
    jitted = nx.jit(f)   # first (no eager call of f before: the warm-up runs)
    outs = []
    for i in range(1, 3):
        outs.append(jitted(w, e, x))
        assert int(counter) == i
    eager = f(w, e, x)
    for out in outs:
        for a, b in zip(torch.utils._pytree.tree_leaves(out),
                        torch.utils._pytree.tree_leaves(eager)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
