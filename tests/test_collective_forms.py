"""nx.lax collectives in their JAX forms (issue 11, item 7): positional ints in an axis
tuple, the empty tuple, pmean of integers, numpy integers in perm.

Every expected value was measured on JAX 0.4.30 with
``xmap(f, in_axes=['i', ...], out_axes=...)(x)`` over ``x = arange(12.).reshape(3, 4)``
(the snippet is in each comment); where JAX cannot run the program, the reference is
the plain loop over the named index, spelled out in the test.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import named_axes as nx
from named_axes import lax

X = torch.arange(12.).reshape(3, 4)
XI = torch.arange(12).reshape(3, 4)


def _run(f, x=X, out_axes=[...]):
    return nx.xmap(f, in_axes=["i", ...], out_axes=out_axes)(x)


# -- positional ints in the axis tuple ------------------------------------------------

def test_psum_named_and_positional():
    # xmap(lambda v: lax.psum(v, ('i', 0)), ['i', ...], [...])(x) -> 66.
    assert torch.equal(_run(lambda v: lax.psum(v, ("i", 0))), torch.tensor(66.))


def test_pmax_pmin_named_and_positional():
    # lax.pmax(v, ('i', 0)) -> 11. ; lax.pmin(v, (0, 'i')) -> 0.
    assert torch.equal(_run(lambda v: lax.pmax(v, ("i", 0))), torch.tensor(11.))
    assert torch.equal(_run(lambda v: lax.pmin(v, (0, "i"))), torch.tensor(0.))
    # lax.pmax(v.astype(int32), ('i', 0)) -> Array(11, dtype=int32)
    out = _run(lambda v: lax.pmax(v.to(torch.int32), ("i", 0)))
    assert out.dtype == torch.int32 and int(out) == 11


def test_positional_only_axis_tuple():
    # lax.psum(v, 0) and lax.psum(v, (0,)), out_axes ['i', ...] -> [ 6., 22., 38.]
    ref = torch.tensor([6., 22., 38.])
    assert torch.equal(_run(lambda v: lax.psum(v, 0), out_axes=["i", ...]), ref)
    assert torch.equal(_run(lambda v: lax.psum(v, (0,)), out_axes=["i", ...]), ref)
    # lax.pmax(v, (0,)) -> [ 3.,  7., 11.]
    assert torch.equal(_run(lambda v: lax.pmax(v, (0,)), out_axes=["i", ...]),
                       torch.tensor([3., 7., 11.]))


def test_pmean_named_and_positional_is_the_mean_over_both():
    # JAX 0.4.30 fails here (pmean divides by psum(1, ('i', 0))); the loop reference:
    # the mean of every entry of every instance.
    assert torch.equal(_run(lambda v: lax.pmean(v, ("i", 0))), X.mean())


def test_positional_axes_on_a_pytree_and_a_plain_tensor():
    # lax.psum((v, 2 * v), ('i', 0)) -> (66., 132.)
    a, b = _run(lambda v: lax.psum((v, 2 * v), ("i", 0)), out_axes=([...], [...]))
    assert torch.equal(a, torch.tensor(66.)) and torch.equal(b, torch.tensor(132.))
    # a plain (unnamed) tensor: the positional part is reduced, the named one multiplies
    out = _run(lambda v: lax.psum(torch.ones(2), ("i", 0)))
    assert torch.equal(out, torch.tensor(6.))


def test_positional_axis_errors():
    # JAX: "duplicate value in 'axes' of reduction: (0, 0)"
    with pytest.raises(nx.AxisSpecError, match=r"psum\(x, \(0, 0\)\): axis=\(0, 0\) names one "
                                               r"positional dim twice"):
        _run(lambda v: lax.psum(v, (0, 0)), out_axes=["i", ...])
    with pytest.raises(nx.AxisSpecError, match=r"psum\(x, \(.i., 3\)\): axis=3 is out of "
                                               r"range for 1 positional dims \(shape"):
        _run(lambda v: lax.psum(v, ("i", 3)))
    # only the reductions take positional axes
    with pytest.raises(nx.AxisSpecError, match=r"all_gather: axis_name \('i', 0\) contains the "
                                               r"positional axis 0; only psum, pmean, pmax"):
        _run(lambda v: lax.all_gather(v, ("i", 0)), out_axes=["i", ...])


def test_positional_axes_gradient():
    w = X.clone().requires_grad_()
    f = nx.xmap(lambda v: lax.psum(v * v, ("i", 0)), in_axes=["i", ...], out_axes=[...])
    f(w).backward()
    torch.testing.assert_close(w.grad, 2 * X)


# -- the empty axis tuple -----------------------------------------------------------------

def test_empty_tuple_reductions_are_identities():
    # lax.psum(v, ()), out_axes ['i', ...] -> x
    for op in (lax.psum, lax.pmax, lax.pmin, lax.pmean):
        assert torch.equal(_run(lambda v: op(v, ()), out_axes=["i", ...]), X)
    # lax.psum(3, ()) -> 3
    assert _run(lambda v: lax.psum(3, ())) == 3


def test_empty_tuple_pmean_of_integers_is_float():
    # lax.pmean(v, ()) over arange(6).reshape(3, 2) -> float32 [[0., 1.], [2., 3.], [4., 5.]]
    x = torch.arange(6).reshape(3, 2)
    out = _run(lambda v: lax.pmean(v, ()), x=x, out_axes=["i", ...])
    assert out.dtype == torch.float32 and torch.equal(out, x.float())


def test_empty_tuple_other_collectives_act_on_a_group_of_one():
    # lax.all_gather(v, ()), out_axes ['i', ...] -> x[:, None, :] (a new axis of size 1)
    assert torch.equal(_run(lambda v: lax.all_gather(v, ()), out_axes=["i", ...]), X[:, None])
    # lax.axis_index(()) -> 0
    assert torch.equal(_run(lambda v: lax.axis_index(())), torch.tensor(0))
    # lax.ppermute(v, (), [(0, 0)]) -> x
    assert torch.equal(_run(lambda v: lax.ppermute(v, (), [(0, 0)]), out_axes=["i", ...]), X)
    # lax.pdot(v, v, ()) -> the outer product per instance
    out = _run(lambda v: lax.pdot(v, v, ()), out_axes=["i", ...])
    assert torch.equal(out, X[:, :, None] * X[:, None, :])


# -- pmean of integers ----------------------------------------------------------------------

def test_pmean_of_integers_is_a_float_mean():
    # lax.pmean(v, 'i') over arange(12).reshape(3, 4) (int32) -> float32 [4., 5., 6., 7.]
    out = _run(lambda v: lax.pmean(v, "i"), x=XI)
    assert out.dtype == torch.float32 and torch.equal(out, torch.tensor([4., 5., 6., 7.]))
    # lax.pmean(v.astype(int32), ('i',)) over arange(6.).reshape(3, 2) -> [2., 3.]
    out = _run(lambda v: lax.pmean(v.to(torch.int32), ("i",)), x=torch.arange(6.).reshape(3, 2))
    assert torch.equal(out, torch.tensor([2., 3.]))
    # lax.pmean(v > 3, 'i') (bool) -> [0.6666667] * 4
    out = _run(lambda v: lax.pmean(v > 3, "i"))
    torch.testing.assert_close(out, torch.full((4,), 2 / 3))
    # psum keeps the integer dtype: lax.psum(v, 'i') -> int32 [12, 15, 18, 21]
    out = _run(lambda v: lax.psum(v, "i"), x=XI)
    assert out.dtype == torch.int64 and torch.equal(out, torch.tensor([12, 15, 18, 21]))
    # lax.pmean(3, 'i') -> 3.0 (float)
    out = _run(lambda v: lax.pmean(3, "i"))
    assert isinstance(out, float) and out == 3.0


# -- numpy integers in perm -------------------------------------------------------------------

ROLLED = torch.stack([X[2], X[0], X[1]])


def test_ppermute_numpy_integers():
    # lax.ppermute(v, 'i', [(np.int64(0), np.int64(1)), (np.int32(1), np.int32(2)),
    #                      (np.int8(2), 0)]) -> [[8..11], [0..3], [4..7]]
    perm = [(np.int64(0), np.int64(1)), (np.int32(1), np.int32(2)), (np.int8(2), 0)]
    assert torch.equal(_run(lambda v: lax.ppermute(v, "i", perm), out_axes=["i", ...]), ROLLED)
    # a 2-d numpy array of pairs: same result
    arr = np.array([[0, 1], [1, 2], [2, 0]])
    assert torch.equal(_run(lambda v: lax.ppermute(v, "i", arr), out_axes=["i", ...]), ROLLED)


def test_pshuffle_numpy_perm():
    # lax.pshuffle(v, 'i', np.array([2, 0, 1])) -> [[8..11], [0..3], [4..7]]
    out = _run(lambda v: lax.pshuffle(v, "i", np.array([2, 0, 1])), out_axes=["i", ...])
    assert torch.equal(out, ROLLED)


def test_bad_perm_entries():
    with pytest.raises(nx.AxisSpecError, match=r"pshuffle\(x, 'i', perm=\[2, 0, 1.5\]\): perm "
                                               r"must be a sequence of integer indices"):
        _run(lambda v: lax.pshuffle(v, "i", [2, 0, 1.5]), out_axes=["i", ...])
    with pytest.raises(nx.AxisSpecError, match=r"perm must be a sequence of \(source, destination\)"):
        _run(lambda v: lax.ppermute(v, "i", [(0, 1, 2)]), out_axes=["i", ...])
