"""A tensor passed where a spec, a name or a size belongs (nx.vmap(f, x) for
nx.vmap(f)(x), say) gets our error, showing the tensor by its type and shape: before, the
messages printed its values (the spec's repr), the plain vmap path gave torch's message
with the values, a tensor axis_size a raw "expand() takes 1 positional argument", and a
tensor was taken as an axis name (JAX: arrays are unhashable, no names)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx

BIG = torch.randn(50, 50)
X = torch.arange(6.).reshape(2, 3)
SHOWN = "<Tensor of shape (50, 50)>"
I = ["i", ...]


@pytest.mark.parametrize("call, error", [
    (lambda: nx.xmap(lambda a: a, in_axes=BIG, out_axes=I), nx.AxisTypeError),
    (lambda: nx.xmap(lambda a: a, in_axes=I, out_axes=BIG), nx.AxisTypeError),
    (lambda: nx.xmap(lambda a: a, in_axes=[BIG, ...], out_axes=I), nx.AxisTypeError),
    (lambda: nx.xmap(lambda a: a, in_axes=I, out_axes=["i", "k", ...], axis_sizes={"k": BIG})(X),
     nx.AxisSizeError),
    (lambda: nx.xmap(lambda a: a, in_axes=I, out_axes=I, axis_resources={"i": BIG})(X),
     nx.AxisTypeError),
    (lambda: nx.xmap(lambda a: nx.lax.psum(a, BIG), in_axes=I, out_axes=I)(X),
     nx.UnboundAxisError),
    (lambda: nx.named(X, BIG), nx.AxisSpecError),
    (lambda: nx.pmap(lambda a: a, in_axes=BIG), nx.AxisSpecError),
    (lambda: nx.pmap(lambda a: a, axis_name=BIG)(X), nx.AxisTypeError),
    (lambda: nx.vmap(lambda a: a, BIG), nx.AxisTypeError),
    (lambda: nx.vmap(lambda a: a, BIG, axis_name="i"), nx.AxisTypeError),
    (lambda: nx.vmap(lambda a: a, out_dims=(0, BIG)), nx.AxisTypeError),
    (lambda: nx.vmap(lambda a: a, in_dims=None, axis_size=BIG), nx.AxisTypeError),
])
def test_the_tensor_is_shown_by_its_shape(call, error):
    with pytest.raises(error) as e:
        call()
    assert SHOWN in str(e.value) and "tensor(" not in str(e.value)


def test_a_tensor_is_no_axis_name():
    # xmap(f, in_axes=[jnp.zeros(2), ...], ...) -> TypeError: unhashable type (jax.Array)
    with pytest.raises(nx.AxisTypeError, match=r"axis name <Tensor of shape \(2,\)> is an "
                                                r"array; names are strings"):
        nx.xmap(lambda a: a, in_axes=[torch.zeros(2), ...], out_axes=[...])(X)
    with pytest.raises(nx.AxisTypeError, match=r"axis_size=3.0; a size is a non-negative int"):
        nx.vmap(lambda a: a, in_dims=None, axis_size=3.0)(X)
