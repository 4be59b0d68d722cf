"""nx.eval_shape of programs that slice at a per-instance start (issue 31, item 3).

The shapes of these ops do not depend on the start, so eval_shape gives them without
values (it runs on fake tensors): each case's shapes, dtypes and named shapes are
compared with those of the eager run.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx
from named_axes import lax

_I = dict(in_axes=['i', ...], out_axes=['i', ...])


def ai():
    return lax.axis_index('i')


def _shapes(out):
    """The ShapeDtypeStructs eval_shape gives for an eager result."""
    return nx.eval_shape(lambda: out)


_CASES = {
    "dynamic_slice": lambda x: lax.dynamic_slice(x, [ai() * 2], [3]),
    "dynamic_slice_in_dim": lambda x: lax.dynamic_slice_in_dim(x, ai() * 2, 2),
    "dynamic_index_in_dim": lambda x: lax.dynamic_index_in_dim(x, ai() + 1, keepdims=False),
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(x, torch.ones(2), [ai() * 3]),
    "dynamic_update_slice_in_dim":
        lambda x: lax.dynamic_update_slice_in_dim(x, x[:2] * 0, ai(), axis=0),
    "dynamic_update_index_in_dim":
        lambda x: lax.dynamic_update_index_in_dim(x[None], x, ai(), 0),
    "narrow": lambda x: torch.narrow(x, 0, ai() * 2, 2),
    "Tensor.narrow": lambda x: x.narrow(0, ai(), 4),
    "index_by_named": lambda x: x[ai()],
    "fori_loop": lambda x: lax.fori_loop(
        0, 3, lambda k, c: c + lax.dynamic_slice_in_dim(x, ai() + k, 2), torch.zeros(2)),
    "scan": lambda x: lax.scan(
        lambda c, k: (c + k, lax.dynamic_slice_in_dim(x, ai() + k.long(), 2)),
        torch.tensor(0.), torch.arange(3.)),
    "cond_named": lambda x: lax.cond(
        ai() > 0, lambda v: lax.dynamic_slice_in_dim(v, ai(), 2), lambda v: v[:2] * 2, x),
    "cond_tensor": lambda x: lax.cond(x.sum() > 0, lambda v: v * 10, lambda v: v, x),
    "while_python_cond": lambda x: lax.while_loop(
        lambda c: False, lambda c: c, lax.dynamic_slice_in_dim(x, ai(), 3)),
}


@pytest.mark.parametrize("name", list(_CASES))
# (x[named index] under eval_shape: the dispatcher's per-instance check of the op runs on
# meta tensors, fake there, and leaves value-reading ops to the op itself)
def test_eval_shape_matches_the_eager_run(name):
    if name == "index_by_named" and tuple(map(int, torch.__version__.split(".")[:2])) < (2, 13):
        pytest.skip("torch < 2.13 words a data-dependent read differently (the check that "
                    "lets it through knows torch 2.13's exception classes)")
    nx.clear_caches()     # cold: no plan or per-instance check remembered from an eager run
    f = nx.xmap(_CASES[name], **_I)
    x = torch.arange(24.).reshape(3, 8)
    assert nx.eval_shape(f, x) == _shapes(f(x))
    # from a description alone, and with a size no eager run could afford
    big = nx.ShapeDtypeStruct((100_000, 8), torch.float32)
    got = nx.eval_shape(f, big)
    ref = _shapes(f(x))
    for g, r in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(ref)):
        assert g.shape == (100_000,) + r.shape[1:] and g.dtype == r.dtype


@pytest.mark.parametrize("name", ["dynamic_slice_in_dim", "narrow", "scan", "cond_named"])
def test_named_shapes_inside_a_map(name):
    # eval_shape called inside the map: the named axis 'i' is bound and stays named
    seen = []

    def body(x):
        seen.append(nx.eval_shape(_CASES[name], x))
        return x
    nx.xmap(body, **_I)(torch.arange(24.).reshape(3, 8))
    eager = []
    nx.xmap(lambda x: eager.append(_shapes(_CASES[name](x))) or x, **_I)(
        torch.arange(24.).reshape(3, 8))
    assert seen == eager
    leaves = torch.utils._pytree.tree_leaves(seen[0])
    assert any(s.named_shape == {'i': 3} for s in leaves)


def test_gradient_and_jit():
    f = nx.xmap(lambda x: torch.narrow(x, 0, ai() * 2, 2) * lax.dynamic_index_in_dim(x, ai()),
                **_I)
    x = torch.arange(24.).reshape(3, 8)
    g = nx.grad(lambda v: f(v).sum())
    assert nx.eval_shape(g, x) == nx.ShapeDtypeStruct((3, 8), torch.float32)
    j = nx.jit(f)
    torch.testing.assert_close(j(x), f(x))           # compiled once, eagerly
    assert nx.eval_shape(j, x) == nx.ShapeDtypeStruct((3, 2), torch.float32)


def test_shapes_that_depend_on_values_are_refused():
    # JAX's eval_shape refuses these too (a ConcretizationTypeError, a TypeError)
    with pytest.raises(nx.AxisTypeError, match=r"eval_shape\(<lambda>\): a result's positional "
                                               r"shape \(u0, 1\) depends on the values"):
        nx.eval_shape(lambda v: torch.nonzero(v > 2), torch.arange(5.))
    with pytest.raises(nx.AxisTypeError, match=r"eval_shape\(<lambda>\): the program needs a "
                                               r"tensor's value"):
        nx.eval_shape(lambda v: torch.zeros(int(v.sum())), torch.arange(5.))


# while_loop / fori_loop whose number of steps is a tensor (per instance or not): xmap runs
# them eagerly; eval_shape runs steps on fake values until the carry's named axes stop
# growing (lax/_control.py's shapes-only path)
_LOOPS = {
    "fori_loop_named_bound": lambda x: lax.fori_loop(0, ai() + 1, lambda k, c: c + x, x * 0),
    "fori_loop_tensor_bound": lambda x: lax.fori_loop(0, torch.tensor(2), lambda k, c: c + x, x),
    "while_loop_named": lambda x: lax.while_loop(
        lambda c: c.sum() < ai() * 10., lambda c: c + x, torch.zeros(8)),
}


@pytest.mark.parametrize("name", list(_LOOPS))
def test_loops_with_tensor_step_counts(name):
    f = nx.xmap(_LOOPS[name], **_I)
    x = torch.arange(24.).reshape(3, 8)
    assert nx.eval_shape(f, x) == _shapes(f(x))
