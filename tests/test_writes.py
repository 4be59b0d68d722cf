"""Writes into existing tensors (named_axes/_writes.py): in-place ops and ``out=``, and the
whole-value comparisons (``torch.equal``, ``torch.allclose``).

Reference: a loop over the named indices.  A write whose target lacks a named axis of
the value written has no loop equivalent (every instance would write the one target in
turn: ``torch.ones(2, 3).mul_(a)`` used to leave 720s), so it must raise."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import named_axes as nx

T = torch.tensor([[1., 2., 3.], [4., 5., 6.]])
A = nx.named(T, 'N C')


@pytest.mark.parametrize("name, write", [
    ("mul_", lambda p, a: p.mul_(a)), ("sub_", lambda p, a: p.sub_(a)),
    ("div_", lambda p, a: p.div_(a)), ("add_", lambda p, a: p.add_(a)),
    ("copy_", lambda p, a: p.copy_(a)), ("lerp_", lambda p, a: p.lerp_(a, 0.5)),
    ("clamp_", lambda p, a: p.clamp_(min=a)), ("addcmul_", lambda p, a: p.addcmul_(a, a)),
    ("masked_fill_", lambda p, a: p.masked_fill_(a > 2, 0.0)),
    ("__imul__", lambda p, a: p.__imul__(a)),
    ("torch.mul_", lambda p, a: torch.Tensor.mul_(p, a)),
])
@pytest.mark.parametrize("target", ["plain", "positional part only"])
def test_inplace_into_a_plain_tensor_refuses_and_leaves_it(name, write, target):
    p = torch.ones(2, 3) if target == "plain" else torch.ones(3)
    before = p.clone()
    with pytest.raises(nx.AxisSizeError, match=rf"in-place update of a plain tensor of shape "
                                               rf"{re.escape(str(tuple(p.shape)))} by a value "
                                               rf"with named axis '(N|C)'.*x = x \+ y"):
        write(p, A)
    assert torch.equal(p, before)


def test_inplace_into_a_named_value_lacking_an_axis_refuses():
    p = nx.named(torch.ones(2, 3), 'N ...')
    with pytest.raises(nx.AxisSizeError, match=r"named shape \{'N': 2\} by a value with named "
                                               r"axis 'C' \(size 3\)"):
        p.mul_(A)


def test_inplace_with_every_axis_matches_the_loop():
    p = nx.named(torch.ones(3, 2), 'C N')
    p.mul_(A).add_(1.0)
    torch.testing.assert_close(nx.positional(p, 'N C'), T + 1.0)


def test_copy_inside_xmap_into_a_closed_over_buffer_refuses():
    stats = torch.zeros(3)

    def body(v):
        stats.copy_(v.mean(0))
        return v
    f = nx.xmap(body, in_axes=['g', ...], out_axes=['g', ...])
    with pytest.raises(nx.AxisSizeError, match=r"Tensor.copy_: in-place update of a plain "
                                               r"tensor of shape \(3,\) by a value with named "
                                               r"axis 'g' \(size 2\)"):
        f(torch.randn(2, 4, 3))
    assert torch.equal(stats, torch.zeros(3))


# -- out= --------------------------------------------------------------------------------

def test_out_named_receives_the_result_in_its_own_layout():
    out = nx.named(torch.empty(3, 2), 'C N')
    r = torch.abs(-A, out=out)
    assert r is out and out.named_shape == {'N': 2, 'C': 3}
    torch.testing.assert_close(nx.positional(out, 'N C'), T)
    r = torch.add(A, 1.0, out=out)
    torch.testing.assert_close(nx.positional(out, 'N C'), T + 1)


def test_out_with_another_named_shape_refuses():
    with pytest.raises(nx.AxisSizeError, match=r"out= has named shape \{'N': 2, 'D': 3\} but "
                                               r"the result has \{'N': 2, 'C': 3\}"):
        torch.abs(A, out=nx.named(torch.zeros(2, 3), 'N D'))


def test_out_plain_cannot_receive_named_axes():
    out = torch.empty(0)
    with pytest.raises(nx.AxisSizeError, match="a plain tensor cannot receive named axes"):
        torch.abs(A, out=out)
    assert out.shape == (0,)


def test_out_resizes_the_positional_shape_as_torch_does():
    a = nx.named(T, 'N ...')
    out = nx.named(torch.empty(2, 0), 'N ...')
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # an empty out is resized silently
        torch.exp(a, out=out)
    assert out.shape == (3,) and out.named_shape == {'N': 2}
    torch.testing.assert_close(nx.positional(out), T.exp())
    out = nx.named(torch.zeros(2, 5), 'N ...')
    with pytest.warns(UserWarning, match="was resized"):
        torch.exp(a, out=out)
    torch.testing.assert_close(nx.positional(out), T.exp())


def test_out_follows_torchs_casting_rule():
    a = nx.named(T, 'N ...')
    out = nx.named(torch.zeros(2, 3, dtype=torch.float64), 'N ...')
    torch.exp(a, out=out)   # (torch.neg refuses a float64 out of float32 values)
    assert out.dtype == torch.float64
    with pytest.raises(nx.AxisSizeError, match="can't be cast to the desired output type"):
        torch.exp(a, out=nx.named(torch.zeros(2, 3, dtype=torch.long), 'N ...'))


def test_out_tuple_and_reduction_by_name():
    a = nx.named(T, 'N ...')
    values = nx.named(torch.empty(2), 'N')
    indices = nx.named(torch.empty(2, dtype=torch.long), 'N')
    torch.max(a, -1, out=(values, indices))
    torch.testing.assert_close(nx.positional(values), T.max(-1).values)
    torch.testing.assert_close(nx.positional(indices), T.max(-1).indices)
    total = nx.named(torch.empty(2), 'N')
    torch.sum(a, -1, out=total)
    torch.testing.assert_close(nx.positional(total), T.sum(-1))


def test_out_refuses_arguments_that_require_grad():
    a = nx.named(T.clone().requires_grad_(), 'N ...')
    with pytest.raises(nx.AxisSizeError, match="don't support automatic differentiation"):
        torch.exp(a, out=nx.named(torch.empty(2, 3), 'N ...'))


# -- equal / allclose: whole values ------------------------------------------------------

def test_equal_compares_whole_values_names_included():
    assert torch.equal(A, nx.named(T.T, 'C N'))
    assert not torch.equal(A, nx.named(T + (torch.arange(6.).view(2, 3) == 0), 'N C'))
    assert not torch.equal(A, nx.named(T, 'N D'))
    assert not torch.equal(A, T)
    assert A.equal(nx.named(T.T.contiguous(), 'C N'))


def test_allclose_aligns_by_name():
    assert torch.allclose(A, nx.named(T.T + 1e-9, 'C N'))
    assert not torch.allclose(A, nx.named(T.T + 1.0, 'C N'))
    assert not torch.allclose(A, nx.named(T, 'N D'))
    assert A.allclose(nx.named(T.T, 'C N'), atol=0.0, rtol=0.0)


# -- the named-tensor queries --------------------------------------------------------------

def test_size_and_stride_by_name():
    x = nx.named(torch.zeros(2, 3, 4), 'N ...')
    assert x.size('N') == 2 and x.stride('N') == 12
    assert x.stride() == (4, 1) and x.stride(-1) == 1
    with pytest.raises(nx.AxisSpecError, match=r"Tensor.size\('channels'\): the value has no "
                                               r"named axis 'channels'"):
        x.size('channels')
    with pytest.raises(nx.AxisSpecError, match=r"Tensor.stride\('C'\)"):
        x.stride('C')


def test_indexing_away_every_named_axis_gives_a_plain_tensor():
    x = nx.named(T, 'N ...')
    out = x[{'N': 1}]
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, T[1])
    assert type(A[{'N': 0}]) is nx.NamedTensor


def test_pytorch_ellipsis_string_in_align_to_and_refine_names():
    t = torch.randn(7, 2)
    assert nx.named(t, 'N C').align_to('N', '...', 'C').shape == (7, 2)
    x = nx.named(torch.zeros(2, 3, 4), 'N ...').refine_names('...', 'C', 'H')
    assert x.named_shape == {'N': 2, 'C': 3, 'H': 4}


def test_equal_inside_xmap_refuses_a_python_bool_per_instance():
    a = torch.tensor([[1., 2.], [3., 4.]])
    b = torch.tensor([[1., 2.], [3., 5.]])
    f = nx.xmap(lambda a, b: torch.tensor(torch.equal(a, b)), in_axes=[['r', ...]] * 2,
                out_axes=['r', ...])
    with pytest.raises(nx.AxisTypeError, match=r"torch.equal: inside xmap each instance of "
                                               r"axis 'r' is its own value"):
        f(a, b)
    g = nx.xmap(lambda a, b: (a == b).all(), in_axes=[['r', ...]] * 2, out_axes=['r', ...])
    assert g(a, b).tolist() == [True, False]
