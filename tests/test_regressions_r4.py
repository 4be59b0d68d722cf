"""Regressions found while merging the transforms' modules (lean core, round 4)."""
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
