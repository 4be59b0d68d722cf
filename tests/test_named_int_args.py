"""Torch ops whose integer arguments vary per instance (named_axes/rules/named_ints.py):
``roll``'s shifts, ``narrow``'s start, ``index_select``'s and ``gather``'s index given as
named integer values (``nx.lax.axis_index('i')``, a named integer tensor).

Each case is checked against a plain Python loop over the named indices (the op applied
with that instance's integer), and ``roll`` against JAX 0.4.30's ``xmap`` (``.venv-jax``
or ``NX_JAX_PYTHON``; skipped without it).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import named_axes as nx
from named_axes import AxisSpecError, AxisTypeError, NamedAxisError, ShapeError

ROOT = Path(__file__).resolve().parent.parent
L = nx.lax
N = 4   # size of the named axis 'i'


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


def per_i(body, x):
    """``body`` under xmap over the leading axis of ``x`` (named 'i')."""
    return nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...])(x)


def loop(ref, x):
    """The reference: ``ref(x[i], i)`` for every index ``i`` of the leading axis."""
    return torch.stack([ref(x[i], i) for i in range(x.shape[0])])


X = torch.randn(N, 5, 6)

# -- roll -------------------------------------------------------------------------------------

ROLLS = {   # name -> (named program, per-instance reference); i is the instance's index
    "dims=0": (lambda v: torch.roll(v, shifts=L.axis_index("i"), dims=0),
               lambda v, i: torch.roll(v, i, 0)),
    "method": (lambda v: v.roll(L.axis_index("i") * 3 - 5, 1),
               lambda v, i: v.roll(i * 3 - 5, 1)),
    "dims=-1 large": (lambda v: torch.roll(v, L.axis_index("i") * 17, -1),
                      lambda v, i: torch.roll(v, i * 17, -1)),
    "no dims (flattened)": (lambda v: torch.roll(v, L.axis_index("i") * 7 - 3),
                            lambda v, i: torch.roll(v, i * 7 - 3)),
    "named and int": (lambda v: torch.roll(v, (L.axis_index("i"), 2), (1, 0)),
                      lambda v, i: torch.roll(v, (i, 2), (1, 0))),
    "two named": (lambda v: torch.roll(v, (L.axis_index("i"), -L.axis_index("i")), (0, 1)),
                  lambda v, i: torch.roll(v, (i, -i), (0, 1))),
    "same dim twice": (lambda v: torch.roll(v, [L.axis_index("i"), 1], [0, 0]),
                       lambda v, i: torch.roll(v, [i, 1], [0, 0])),
}


@pytest.mark.parametrize("case", list(ROLLS))
def test_roll_named_shift_matches_loop(case):
    body, ref = ROLLS[case]
    close(per_i(body, X), loop(ref, X))


def test_roll_shift_with_other_names_broadcasts():
    # the shift carries 'j', the value 'i': the result carries both, as a loop over (i, j)
    x = torch.randn(3, 7)
    s = torch.tensor([0, 2, -9, 40, 5])
    r = torch.roll(nx.named(x, "i ..."), nx.named(s, "j"), 0)
    assert r.named_shape == {"i": 3, "j": 5} and r.shape == (7,)
    ref = torch.stack([torch.stack([torch.roll(x[i], int(s[j]), 0) for j in range(5)])
                       for i in range(3)])
    close(nx.positional(r, "i j ..."), ref)


def test_roll_plain_value_named_shift():
    x = torch.arange(5.)
    r = torch.roll(x, nx.named(torch.arange(3), "j"))
    assert r.named_shape == {"j": 3}
    close(nx.positional(r, "j ..."), torch.stack([torch.roll(x, j) for j in range(3)]))


def test_roll_named_shift_vector_one_per_dim():
    # a shift with positional shape (len(dims),): one named shift per dim
    s = nx.named(torch.tensor([[0, 1], [2, -3], [4, 5], [-1, 0]]), "i ...")
    r = torch.roll(nx.named(X, "i ..."), s, (0, 1))
    ref = torch.stack([torch.roll(X[i], tuple(int(e) for e in s._data[i]), (0, 1))
                       for i in range(N)])
    close(nx.positional(r, "i ..."), ref)


def test_roll_empty_dim_and_scalar_instances():
    e = torch.randn(N, 0, 3)
    r = per_i(lambda v: torch.roll(v, L.axis_index("i"), 0), e)
    assert r.shape == (N, 0, 3)
    s = torch.randn(N)
    close(per_i(lambda v: torch.roll(v, L.axis_index("i")), s), s)


def test_roll_int_shifts_on_named_value():
    # the plain-int forms keep their one-call lane
    x = nx.named(X, "i ...")
    close(nx.positional(x.roll(2, 1), "i ..."), X.roll(2, 2))
    close(nx.positional(torch.roll(x, 3), "i ..."), loop(lambda v, i: torch.roll(v, 3), X))
    close(nx.positional(torch.roll(x, (1, -2), (1, 0)), "i ..."), X.roll((1, -2), (2, 1)))


def test_roll_errors_name_the_argument():
    x = nx.named(X, "i ...")
    i = nx.named(torch.arange(N), "i")
    with pytest.raises(AxisTypeError, match="torch.roll: shifts must hold integers, got dtype"):
        torch.roll(x, i.float(), 0)
    with pytest.raises(AxisTypeError, match="shifts must be ints or integer values.*1.5"):
        x.roll(1.5, 0)   # (torch.roll(x, 1.5, 0): torch 2.13's parser refuses it first)
    with pytest.raises(ShapeError, match=r"shifts and dims must align: 2 shift\(s\) for no dims"):
        torch.roll(x, (i, 1))
    with pytest.raises(ShapeError, match=r"shifts and dims must align: 1 shift\(s\) for dims"):
        torch.roll(x, i, (0, 1))
    with pytest.raises(AxisSpecError, match="roll shifts positional dims.*ppermute"):
        x.roll(i, "i")
    with pytest.raises(AxisSpecError, match=r"shifts as a tensor must have positional shape"):
        torch.roll(x, nx.named(torch.zeros(N, 2, 2, dtype=torch.long), "i ..."), (0, 1))
    with pytest.raises(NamedAxisError, match="out of range"):
        torch.roll(x, i, 5)


# -- narrow -----------------------------------------------------------------------------------

NARROWS = {
    "torch.narrow": (lambda v: torch.narrow(v, 0, L.axis_index("i"), 2),
                     lambda v, i: torch.narrow(v, 0, i, 2)),
    "method": (lambda v: v.narrow(1, L.axis_index("i"), 3), lambda v, i: v.narrow(1, i, 3)),
    "negative start": (lambda v: v.narrow(-1, -2 - L.axis_index("i"), 2),
                       lambda v, i: v.narrow(-1, -2 - i, 2)),
    "keywords": (lambda v: torch.narrow(v, dim=1, start=L.axis_index("i") - 4, length=1),
                 lambda v, i: torch.narrow(v, dim=1, start=i - 4, length=1)),
    "length 0": (lambda v: v.narrow(0, L.axis_index("i"), 0), lambda v, i: v.narrow(0, i, 0)),
}


@pytest.mark.parametrize("case", list(NARROWS))
def test_narrow_named_start_matches_loop(case):
    body, ref = NARROWS[case]
    close(per_i(body, X), loop(ref, X))


def test_narrow_start_with_other_names_and_plain_input():
    x = torch.randn(3, 8)
    s = torch.tensor([0, 5, -3])
    r = nx.named(x, "i ...").narrow(0, nx.named(s, "j"), 3)
    assert r.named_shape == {"i": 3, "j": 3} and r.shape == (3,)
    ref = torch.stack([torch.stack([x[i].narrow(0, int(s[j]), 3) for j in range(3)])
                       for i in range(3)])
    close(nx.positional(r, "i j ..."), ref)
    r = torch.narrow(x, 1, nx.named(s, "j"), 3)     # a plain input, a named start
    assert r.named_shape == {"j": 3} and r.shape == (3, 3)
    close(nx.positional(r, "j ..."), torch.stack([x.narrow(1, int(v), 3) for v in s]))


def test_narrow_out_of_range_start_names_the_instance():
    with pytest.raises(ShapeError, match=r"torch.narrow: start is out of range at instance "
                                         r"\{'i': 2\}: start 4 with length 2 does not fit dim "
                                         r"0 of size 5") as e:
        per_i(lambda v: torch.narrow(v, 0, L.axis_index("i") * 2, 2), X)
    assert "input: positional shape (5, 6), named shape {'i': 4}" in str(e.value)
    assert "dynamic_slice_in_dim" in str(e.value) and "tensor(" not in str(e.value)
    with pytest.raises(ShapeError, match=r"at instance \{'i': 1\}: start -1 with length 2"):
        per_i(lambda v: v.narrow(0, L.axis_index("i") - 2, 2), X)
    with pytest.raises(ShapeError, match=r"at instance \{'i': 0\}: start -6"):
        per_i(lambda v: v.narrow(0, L.axis_index("i") - 6, 1), X)
    with pytest.raises(ShapeError, match="length 7 does not fit dim 0 of size 5"):
        per_i(lambda v: v.narrow(0, L.axis_index("i"), 7), X)


def test_narrow_errors_name_the_argument():
    x = nx.named(X, "i ...")
    i = nx.named(torch.arange(N), "i")
    with pytest.raises(AxisTypeError, match="length must be a Python int, got a tensor"):
        x.narrow(0, 0, i)
    with pytest.raises(AxisTypeError, match="Tensor.narrow: start must hold integers"):
        x.narrow(0, i.float(), 1)
    with pytest.raises(AxisSpecError, match=r"start must be one integer per instance "
                                            r"\(positional shape \(\)\), got positional shape"):
        x.narrow(0, nx.named(torch.zeros(N, 2, dtype=torch.long), "i ..."), 1)
    with pytest.raises(AxisSpecError, match="narrow acts on a positional dim"):
        x.narrow("i", i, 1)
    with pytest.raises(AxisTypeError, match="dim must be a positional dim"):
        x.narrow(i, 0, 1)


def test_narrow_under_tracing_clamps_as_jax():
    # values cannot be read while nx.jit traces: starts are clamped (docstring of narrow)
    f = nx.jit(nx.xmap(lambda v: v.narrow(0, L.axis_index("i") * 2 - 1, 2),
                       in_axes=["i", ...], out_axes=["i", ...]))
    ref = per_i(lambda v: L.dynamic_slice_in_dim(v, L.axis_index("i") * 2 - 1, 2, 0), X)
    close(f(X), ref)


# -- index_select / gather --------------------------------------------------------------------

INDEXING = {
    "index_select 1-D": (lambda v: torch.index_select(v, 1, torch.stack(
                            [L.axis_index("i"), 5 - L.axis_index("i")])),
                         lambda v, i: torch.index_select(v, 1, torch.tensor([i, 5 - i]))),
    "index_select 0-d": (lambda v: v.index_select(0, L.axis_index("i")),
                         lambda v, i: v.index_select(0, torch.tensor(i))),
    "gather": (lambda v: torch.gather(v, 1, (L.axis_index("i") + torch.arange(6)[None, :3]
                                             ).expand(5, 3) % 6),
               lambda v, i: torch.gather(v, 1, ((i + torch.arange(6)[None, :3]) % 6
                                                ).expand(5, 3))),
    "gather method dim 0": (lambda v: v.gather(0, (L.axis_index("i") + torch.zeros(
                                2, 6, dtype=torch.long))),
                            lambda v, i: v.gather(0, torch.full((2, 6), i))),
}


@pytest.mark.parametrize("case", list(INDEXING))
def test_named_index_matches_loop(case):
    body, ref = INDEXING[case]
    close(per_i(body, X), loop(ref, X))


def test_index_out_of_range_names_the_instance():
    with pytest.raises(ShapeError, match=r"torch.index_select: index is out of range at "
                                         r"instance \{'i': 3\}, position \(0,\): it holds 6, "
                                         r"but dim 1 has size 6") as e:
        per_i(lambda v: torch.index_select(v, 1, L.axis_index("i")[None] * 2), X)
    assert "tensor(" not in str(e.value)
    with pytest.raises(ShapeError, match=r"torch.gather: index is out of range at instance "
                                         r"\{'i': 1\}, position \(0, 0\): it holds -1"):
        per_i(lambda v: torch.gather(v, 0, (1 - 2 * L.axis_index("i")) + torch.zeros(
            1, 6, dtype=torch.long)), X)
    # a plain index on a named value: the same position in every instance
    with pytest.raises(ShapeError, match=r"Tensor.index_select: index is out of range at "
                                         r"position \(1,\): it holds 7, but dim 0 has size 5"):
        nx.named(X, "i ...").index_select(0, torch.tensor([0, 7]))


# -- transforms -------------------------------------------------------------------------------

def _roll_narrow(v):
    i = L.axis_index("i")
    return torch.roll(v, (i, 1 - i), (0, 1)).narrow(1, i, 2) * 2.0


def _roll_narrow_ref(v, i):
    return torch.roll(v, (i, 1 - i), (0, 1)).narrow(1, i, 2) * 2.0


def test_nx_jit_matches_loop():
    f = nx.jit(nx.xmap(_roll_narrow, in_axes=["i", ...], out_axes=["i", ...]))
    close(f(X), loop(_roll_narrow_ref, X))
    close(f(X + 1), loop(_roll_narrow_ref, X + 1))


def test_torch_compile_fullgraph_matches_loop():
    f = torch.compile(nx.xmap(_roll_narrow, in_axes=["i", ...], out_axes=["i", ...]),
                      fullgraph=True, backend="aot_eager")
    close(f(X), loop(_roll_narrow_ref, X))


GRADS = {   # a per-instance loss of the float operand
    "roll": (lambda v: torch.roll(v, L.axis_index("i") * 2 - 1, 1),
             lambda v, i: torch.roll(v, i * 2 - 1, 1)),
    "roll flattened": (lambda v: torch.roll(v, L.axis_index("i") * 5),
                       lambda v, i: torch.roll(v, i * 5)),
    "narrow": (lambda v: v.narrow(1, L.axis_index("i"), 2), lambda v, i: v.narrow(1, i, 2)),
    "index_select": (lambda v: v.index_select(0, torch.stack([L.axis_index("i")] * 2)),
                     lambda v, i: v.index_select(0, torch.tensor([i, i]))),
    "gather": (lambda v: v.gather(1, L.axis_index("i") + torch.zeros(5, 2, dtype=torch.long)),
               lambda v, i: v.gather(1, torch.full((5, 2), i))),
}
W = torch.randn(5, 6)


@pytest.mark.parametrize("case", list(GRADS))
def test_grad_of_the_float_operand_matches_loop(case):
    op, ref = GRADS[case]

    def loss(v):
        out = op(v)
        return (out * W[tuple(slice(0, n) for n in out.shape)]).sum()

    g = per_i(lambda v: nx.grad(loss)(v), X)

    def ref_grad(v, i):
        v = v.clone().requires_grad_()
        out = ref(v, i)
        (out * W[tuple(slice(0, n) for n in out.shape)]).sum().backward()
        return v.grad

    close(g, loop(ref_grad, X))


# -- against JAX 0.4.30 -----------------------------------------------------------------------

JAX_SCRIPT = r"""
import json, os, warnings
os.environ.setdefault("JAX_PLATFORMS", "cpu"); warnings.simplefilter("ignore")
import numpy as np, jax, jax.numpy as jnp
from jax.experimental.maps import xmap
x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
i = lambda: jax.lax.axis_index("i")
CASES = {
    "roll dim 0": lambda v: jnp.roll(v, i() * 3 - 4, 0),
    "roll flattened": lambda v: jnp.roll(v, i() * 7 - 3),
    "roll two dims": lambda v: jnp.roll(v, (i(), 2 - 2 * i()), (1, 0)),
    "narrow": lambda v: jax.lax.dynamic_slice_in_dim(v, i(), 2, 1),
}
out = {k: np.asarray(xmap(f, in_axes=["i", ...], out_axes=["i", ...])(x)).tolist()
       for k, f in CASES.items()}
print(json.dumps(out))
"""

TORCH_CASES = {
    "roll dim 0": lambda v: torch.roll(v, L.axis_index("i") * 3 - 4, 0),
    "roll flattened": lambda v: torch.roll(v, L.axis_index("i") * 7 - 3),
    "roll two dims": lambda v: torch.roll(v, (L.axis_index("i"), 2 - 2 * L.axis_index("i")),
                                          (1, 0)),
    "narrow": lambda v: v.narrow(1, L.axis_index("i"), 2),
}


@pytest.fixture(scope="module")
def jax_results():
    from conftest import run_jax_script

    return run_jax_script(JAX_SCRIPT)


@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_matches_jax(case, jax_results):
    x = torch.arange(4 * 5 * 6, dtype=torch.float32).reshape(4, 5, 6)
    close(per_i(TORCH_CASES[case], x), torch.tensor(jax_results[case]))
