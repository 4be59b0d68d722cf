"""nx.lax takes numpy arrays where jax.lax does, converted as torch.as_tensor converts
them (a float64 array stays float64: torch's rule, where JAX without x64 gives float32);
before, every nx.lax function refused them with 'must be a tensor, NamedTensor or number'."""
import numpy as np
import pytest
import torch

import named_axes as nx


def test_collectives_take_numpy_arrays():
    f = nx.xmap(lambda x: (nx.lax.psum(np.ones(3, np.float32), 'i'),
                           nx.lax.pdot(x, np.ones(2, np.float32), 'i')),
                in_axes=['i', ...], out_axes=([...], [...]))
    s, d = f(torch.arange(2.))
    assert torch.equal(s, torch.full((3,), 2.)) and torch.equal(d, torch.ones(2))


def test_slicing_and_select_take_numpy_arrays():
    assert torch.equal(nx.lax.dynamic_slice(np.arange(5.), (1,), (2,)),
                       torch.tensor([1., 2.], dtype=torch.float64))
    assert torch.equal(nx.lax.select(np.array([True, False]), np.ones(2), np.zeros(2)),
                       torch.tensor([1., 0.], dtype=torch.float64))
    assert nx.lax.expand_dims(np.ones(2, np.float32), (0,)).shape == (1, 2)


def test_control_flow_takes_numpy_arrays():
    c, ys = nx.lax.scan(lambda c, x: (c + x, c), torch.tensor(0., dtype=torch.float64),
                        np.arange(3.))
    assert torch.equal(ys, torch.tensor([0., 0., 1.], dtype=torch.float64))
    assert torch.equal(nx.lax.cond(np.bool_(False), lambda v: v, lambda v: v * 2,
                                   torch.ones(1)), torch.full((1,), 2.))
    assert torch.equal(nx.lax.cond(np.array(True), lambda v: v, lambda v: v * 2,
                                   torch.ones(1)), torch.ones(1))


def test_other_objects_still_refused():
    with pytest.raises(TypeError, match="numpy array"):
        nx.lax.squeeze("abc", (0,))
