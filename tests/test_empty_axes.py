"""A named axis of size 0: zero instances.  The result has the shape one instance would
have, with the named axis of size 0 (the per-instance loop, stacked, gives that), or
our error where one instance's op is undefined (an empty maximum).  JAX's xmap has no
answer here (it divides by the axis size and raises ZeroDivisionError), so the loop is
the reference.
"""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


@pytest.fixture
def z():
    return nx.named(torch.zeros(0, 6), "N")   # per instance: a vector of 6


@pytest.mark.parametrize("op, shape", [
    (lambda x: x.view(-1), (6,)),
    (lambda x: x.reshape(2, -1), (2, 3)),
    (lambda x: x.view(-1, 3), (2, 3)),
    (lambda x: torch.reshape(x, (3, 2)), (3, 2)),
    (lambda x: x.sum(), ()),
    (lambda x: x.amax(), ()),
    (lambda x: x @ torch.ones(6, 4), (4,)),
    (lambda x: x.softmax(0), (6,)),
    (lambda x: x.view(2, 3).flatten(), (6,)),
])
def test_ops_keep_the_instance_shape(op, shape, z):
    out = op(z)
    assert out.named_shape == {"N": 0} and out.shape == shape


@pytest.mark.parametrize("shape", [(-1, 4), (2, 2), (0, -1)])
def test_a_shape_no_instance_could_take_is_refused(shape, z):
    """With no instances torch sees 0 elements and would take any shape: the instance's
    size decides, as torch decides for one instance."""
    with pytest.raises(nx.ShapeError, match=r"is invalid for an instance of 6 elements"):
        z.view(*shape)


def test_collectives_over_an_empty_axis():
    run = lambda op: nx.xmap(lambda x: op(x, "N"), in_axes=["N", ...],   # noqa: E731
                             out_axes=[...])(torch.zeros(0, 3))
    torch.testing.assert_close(run(nx.lax.psum), torch.zeros(3))
    assert run(nx.lax.pmean).isnan().all()       # torch's mean of nothing
    for op, what in ((nx.lax.pmax, "maximum"), (nx.lax.pmin, "minimum")):
        with pytest.raises(nx.AxisSizeError, match=rf"over axis 'N' of size 0: no instance "
                                                    rf"to take the {what} of"):
            run(op)


def test_a_named_reduction_error_shows_torchs_message_not_a_positional_rerun(z):
    with pytest.raises(nx.ShapeError, match=r"Expected reduction dim 0 to have non-zero size"):
        z.amax("N")


@pytest.mark.parametrize("sizes, starts", [([0, 3], [3, "b"]), ([1, 0], ["b", 2]),
                                           ([0, 0], ["b", "b"])])
def test_empty_dynamic_slice_with_a_per_instance_start(sizes, starts):
    """An empty slice (or one of an operand emptied by an earlier dim) reads nothing: the
    result has its shape and the start's named axes, and a zero derivative (torch-xla's
    gather lowering refused the empty gather this once built: mesh oracle seed 9324,
    p9324_00207)."""
    x = torch.arange(12.).view(3, 4).requires_grad_()

    def f(x):
        st = [nx.lax.axis_index("b") if s == "b" else s for s in starts]
        return nx.lax.dynamic_slice(x, st, sizes)

    out = nx.xmap(f, in_axes=[...], out_axes=["b", ...], axis_sizes={"b": 2})(x)
    assert out.shape == (2, *sizes) and out.requires_grad
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()
