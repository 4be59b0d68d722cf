"""In-place ops and views on NamedTensors (SPEC §1, issue 2 item 3).

An in-place op must not broadcast a named axis into a value that lacks it (an error,
not a silent broadcast); in-place updates through a view reach the base.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

torch.manual_seed(0)


def _pair():
    a = torch.rand(2, 3, dtype=torch.float64)          # {'i': 2}, positional (3,)
    b = torch.rand(2, 4, 3, dtype=torch.float64)       # {'i': 2, 'j': 4}, positional (3,)
    return a, b, nx.named(a.clone(), {0: "i"}), nx.named(b.clone(), {0: "i", 1: "j"})


@pytest.mark.parametrize("op", [
    lambda x, y: x.add_(y), lambda x, y: x.mul_(y), lambda x, y: x.sub_(y, alpha=2),
    lambda x, y: x.copy_(y), lambda x, y: x.clamp_min_(y), lambda x, y: x.lerp_(y, 0.5),
    lambda x, y: x.__iadd__(y), lambda x, y: x.__imul__(y), lambda x, y: x.atan2_(y),
], ids=["add_", "mul_", "sub_", "copy_", "clamp_min_", "lerp_", "iadd", "imul", "atan2_"])
def test_inplace_that_would_broadcast_a_named_axis_is_an_error(op):
    _, _, x, y = _pair()
    before = x._data.clone()
    with pytest.raises(nx.AxisSizeError, match=r"named axis 'j'.*would write every instance"):
        op(x, y)
    assert torch.equal(x._data, before)     # nothing was written


def test_augmented_assignment_error_and_setitem_error():
    _, _, x, y = _pair()
    with pytest.raises(nx.AxisSizeError, match="'j'"):
        x += y
    with pytest.raises(nx.AxisSizeError, match=r"value has named axis 'j' \(size 4\)"):
        x[0:2] = y[0:2]


def test_inplace_positional_broadcast_into_smaller_value_is_an_error():
    x = nx.named(torch.rand(2, 3), {0: "i"})
    with pytest.raises(RuntimeError, match=r"in-place|Tensor.add_"):
        x.add_(torch.rand(4, 3))


def test_inplace_with_fewer_names_updates_per_index():
    a, b, x, y = _pair()
    y.add_(x)               # x lacks 'j': broadcast into y is fine
    torch.testing.assert_close(nx.positional(y, {0: "i", 1: "j"}), b + a[:, None, :])
    y *= 2.0
    torch.testing.assert_close(nx.positional(y, {0: "i", 1: "j"}), 2 * (b + a[:, None, :]))
    y.sub_(torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(nx.positional(y, {0: "i", 1: "j"}), 2 * (b + a[:, None, :]) - 1)


def test_inplace_returns_the_same_object():
    _, _, x, y = _pair()
    assert y.mul_(x) is y
    z = y
    z += 1.0
    assert z is y


def test_inplace_through_views_reaches_the_base():
    base = torch.rand(2, 3, 4, dtype=torch.float64)
    x = nx.named(base.clone(), {0: "i"})
    ref = base.clone()
    x[:, 1].mul_(10.0)                  # a view of positional (3, 4)
    ref[:, :, 1] *= 10.0
    x.transpose(0, 1)[0].zero_()        # transposed view
    ref[:, :, 0] = 0.0
    x.select(1, 2).fill_(7.0)
    ref[:, :, 2] = 7.0
    x.view(12)[-1:].add_(1.0)
    ref.view(2, 12)[:, -1:] += 1.0
    torch.testing.assert_close(nx.positional(x, {0: "i"}), ref)


def test_setitem_writes_every_named_index():
    a, b, x, y = _pair()
    x[1] = 5.0
    a = a.clone()
    a[:, 1] = 5.0
    torch.testing.assert_close(nx.positional(x, {0: "i"}), a)
    v = nx.named(torch.arange(2.0, dtype=torch.float64), {0: "i"})   # per-index scalar
    x[0] = v
    a[:, 0] = torch.arange(2.0, dtype=torch.float64)
    torch.testing.assert_close(nx.positional(x, {0: "i"}), a)


def test_squeeze_unsqueeze_inplace_change_the_positional_shape():
    x = nx.named(torch.rand(2, 1, 3), {0: "i"})
    x.squeeze_(0)
    assert x.shape == (3,) and x.named_shape == {"i": 2}
    x.unsqueeze_(-1)
    assert x.shape == (3, 1)


def test_inplace_under_xmap_on_a_replicated_value_is_an_error():
    def f(x, y):
        x.add_(y)
        return x

    g = nx.xmap(f, in_axes=({}, {0: "i"}), out_axes={})
    with pytest.raises(ValueError, match="'i'"):
        g(torch.zeros(3), torch.ones(2, 3))


def _per_instance(op, base: torch.Tensor, names: int):
    """What the per-instance loop does: ``op`` on each instance's views (leading
    ``names`` dims named) of a copy of ``base``; the copy, or the error torch raised."""
    data = base.clone()
    try:
        for i in range(data.shape[0]):
            op(data[i])
    except RuntimeError as e:
        return e
    return data


@pytest.mark.parametrize("op", [
    lambda v: v[..., 1:].copy_(v[..., :2]),        # overlapping within an instance
    lambda v: v[..., :2].add_(v[..., 1:]),
    lambda v: v[..., :1].copy_(v[..., 2:]),        # disjoint parts of one instance
    lambda v: v.mul_(v),                           # the same memory exactly
    lambda v: v[..., ::2].copy_(v[..., 1:2]),
], ids=["copy-overlap", "add-overlap", "copy-disjoint", "mul-self", "strided"])
def test_inplace_between_views_of_one_value_matches_the_per_instance_loop(op):
    """Target and operand in the same memory: the result is the per-instance loop's, or
    our error where torch refuses each instance's write (was: torch's write of the whole
    tensor at once, which the loop never gives)."""
    base = torch.arange(12.).reshape(4, 3)
    want = _per_instance(op, base, 1)
    n = nx.named(base.clone(), {0: "i"})
    if isinstance(want, RuntimeError):
        with pytest.raises(nx.AxisSizeError, match="overlaps within one instance"):
            op(n)
        assert torch.equal(n._data, base)          # nothing was written
    else:
        op(n)
        assert torch.equal(n._data, want)
