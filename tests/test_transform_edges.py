"""Edge cases of the transforms' inputs and results: numpy arrays in jit/vectorize, has_aux pairs,
device_put of named leaves, mis-shaped cotangents (each failed before its fix)."""
import numpy as np
import pytest
import torch

import named_axes as nx


def test_jit_takes_a_numpy_array_with_negative_strides():
    # torch.from_numpy refuses negative strides: jit raised a raw ValueError where xmap
    # and JAX's jit take the array
    out = nx.jit(lambda x: x * 2)(np.arange(3.0)[::-1])
    assert torch.equal(out, torch.tensor([4.0, 2.0, 0.0], dtype=torch.float64))


def test_jit_keeps_a_zero_d_numpy_array_zero_d():
    out = nx.jit(lambda x: x * 2)(np.array(3.0))
    assert out.shape == () and float(out) == 6.0


def test_vectorize_takes_a_numpy_array_with_negative_strides():
    out = nx.vectorize(lambda x: x * 2)(np.arange(3.0)[::-1])
    assert torch.equal(out, torch.tensor([4.0, 2.0, 0.0], dtype=torch.float64))


def test_vjp_and_jvp_with_has_aux_refuse_a_result_that_is_no_pair():
    # a (2, 3) tensor was unpacked as (out, aux): its rows, silently
    f = lambda x: x * 2   # noqa: E731
    with pytest.raises(nx.AxisTypeError, match=r"has_aux=True needs fun to return \(out, aux\)"):
        nx.vjp(f, torch.ones(2, 3), has_aux=True)
    with pytest.raises(nx.AxisTypeError, match=r"has_aux=True needs fun to return \(out, aux\)"):
        nx.jvp(f, (torch.ones(2, 3),), (torch.ones(2, 3),), has_aux=True)


def test_device_put_replicated_stacks_a_named_leaf_too():
    # a NamedTensor leaf came back as it was, without the leading axis its plain
    # neighbours got
    x = nx.named(torch.arange(6.0).reshape(2, 3), "b ...")
    out = nx.device_put_replicated({"x": x, "y": torch.ones(3)}, ["cpu", "cpu"])
    assert out["x"].named_shape == {"b": 2} and out["x"].shape == (2, 3)
    assert torch.equal(out["x"]._data, x._data.unsqueeze(1).expand(2, 2, 3))
    assert out["y"].shape == (2, 3)


def test_device_put_sharded_stacks_named_shards():
    # torch.as_tensor of a NamedTensor failed with a raw TypeError
    x = nx.named(torch.arange(6.0).reshape(2, 3), "b ...")
    out = nx.device_put_sharded([x, x * 2], ["cpu", "cpu"])
    assert out.named_shape == {"b": 2} and out.shape == (2, 3)
    assert torch.equal(out._data, torch.stack([x._data, x._data * 2], 1))


def test_a_cotangent_or_tangent_of_the_wrong_shape_is_a_shape_error():
    # the broadcast to the primal's shape failed with torch's raw RuntimeError
    _, pull = nx.vjp(torch.sin, torch.zeros(2, 3))
    with pytest.raises(nx.ShapeError, match=r"cotangent 0: positional shape \(4,\) does not "
                                            r"broadcast to the primal/output's \(2, 3\)"):
        pull(torch.ones(4))
    with pytest.raises(nx.ShapeError, match=r"tangent 0: positional shape \(4,\)"):
        nx.jvp(torch.sin, (torch.zeros(2, 3),), (torch.ones(4),))
