"""nx.vmap's ``randomness`` on its named path (axis_name=, inside a named program, chunked)
draws as ``torch.func.vmap``'s does: 'error' refuses a random op (a RandomnessError, also
a RuntimeError like torch's), 'different' draws per instance (a draw whose operands lack
the mapped axis too), 'same' draws once for every instance.  Was: the argument was ignored
(draws on named operands per instance, plain draws shared, whatever it said)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import named_axes as nx
from named_axes import lax

X = torch.rand(4, 3)

PROGRAMS = {
    "plain randn": lambda r: r + torch.randn(3),
    "randn 0-d": lambda r: r + torch.randn(()),
    "randn_like": lambda r: torch.randn_like(r),
    "dropout": lambda r: F.dropout(r + 1, 0.5),
    "dropout of a plain value": lambda r: r * torch.nn.Dropout(0.5)(torch.ones(3)),
    "Tensor.normal_": lambda r: r.clone().normal_(),
    "bernoulli of a plain value": lambda r: r + torch.bernoulli(torch.full((3,), 0.5)),
    "randint": lambda r: r + torch.randint(0, 100, (3,)),
    "with a psum": lambda r: lax.psum(r, "i") + torch.rand(3),
}

NAMED = {   # the named path: with an axis name; chunked
    "axis_name": lambda f, m: nx.vmap(f, randomness=m, axis_name="i"),
    "chunk_size": lambda f, m: nx.vmap(f, randomness=m, chunk_size=3, axis_size=4),
}


def _drawn(fn):
    torch.manual_seed(0)
    return fn(X)


@pytest.mark.parametrize("path", list(NAMED))
@pytest.mark.parametrize("name", [n for n in PROGRAMS if n != "with a psum"])
@pytest.mark.parametrize("mode", ["different", "same"])
def test_draws_equal_torch_func_vmap(mode, name, path):
    kw = {"chunk_size": 3} if path == "chunk_size" else {}
    want = _drawn(torch.func.vmap(PROGRAMS[name], randomness=mode, **kw))
    got = _drawn(NAMED[path](PROGRAMS[name], mode))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["different", "same"])
def test_collective_program_draws_per_randomness(mode):
    got = _drawn(nx.vmap(PROGRAMS["with a psum"], randomness=mode, axis_name="i"))
    noise = got - X.sum(0)
    assert all(torch.equal(noise[0], noise[k]) != (mode == "different") for k in range(1, 4))


@pytest.mark.parametrize("path", list(NAMED))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_error_mode_refuses_random_ops(name, path):
    if name == "with a psum" and path == "chunk_size":
        pytest.skip("chunks map an anonymous axis: no collective over it")
    with pytest.raises(nx.RandomnessError, match="randomness") as info:
        NAMED[path](PROGRAMS[name], "error")(X)
    assert isinstance(info.value, RuntimeError)   # (torch.func.vmap's type)
    with pytest.raises(nx.RandomnessError):        # the default
        nx.vmap(PROGRAMS[name], axis_name="i")(X)


def test_error_mode_runs_ops_that_do_not_draw():
    f = lambda r: F.dropout(r, 0.5, training=False) + F.dropout(r, 0.0) * 0  # noqa: E731
    torch.testing.assert_close(nx.vmap(f, axis_name="i")(X), X)


def test_nested_vmaps_each_axis_its_own_randomness():
    x = torch.zeros(2, 3, 50)
    for outer, inner in [("different", "same"), ("same", "different")]:
        f = nx.vmap(nx.vmap(lambda r: r + torch.randn(50), randomness=inner, axis_name="j"),
                    randomness=outer, axis_name="i")
        out = f(x)
        assert torch.equal(out[0], out[1]) == (outer == "same")
        assert torch.equal(out[:, 0], out[:, 1]) == (inner == "same")


def test_vmap_of_an_xmap_body_draws_per_vmap_instance():
    body = nx.xmap(lambda r: r + torch.randn(50), in_axes=["k", ...], out_axes=["k", ...])
    x = torch.zeros(2, 3, 50)
    out = nx.vmap(body, randomness="different", axis_name="i")(x)
    assert not torch.equal(out[0], out[1])
    assert torch.equal(out[:, 0], out[:, 1])   # (xmap: a plain draw is shared along 'k')
    with pytest.raises(nx.RandomnessError):
        nx.vmap(body, axis_name="i")(x)


def test_vmap_of_grad_with_dropout_equals_torch():
    f = lambda w: (F.dropout(w, 0.5) * w).sum()  # noqa: E731
    for mode in ("different", "same"):
        torch.manual_seed(0)
        want = torch.func.vmap(torch.func.grad(f), randomness=mode)(X)
        torch.manual_seed(0)
        got = nx.vmap(nx.grad(f), randomness=mode, axis_name="i")(X)
        torch.testing.assert_close(got, want)
