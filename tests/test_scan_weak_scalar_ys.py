"""``nx.lax.scan`` whose ``y`` is a Python number at one step (the initial carry, ``0.0``)
and a tensor at the others stacks them in the tensors' dtype, as JAX 0.4.30 gives it (a
Python number is weakly typed); the number's own default dtype had widened the ys
(float16 -> float32, int32 -> int64)."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


@pytest.mark.parametrize("dtype,init", [(torch.float16, 0.0), (torch.bfloat16, 0.0),
                                        (torch.int32, 0), (torch.int8, 0)])
def test_ys_keep_the_tensors_dtype(dtype, init):
    x = torch.arange(12).reshape(3, 4).to(dtype)
    c, ys = nx.xmap(lambda x: nx.lax.scan(lambda c, a: (c + a, c), init, x), in_axes=['i', ...],
                    out_axes=(['i', ...], ['i', ...]))(x)
    assert ys.dtype == dtype and c.dtype == dtype
    want = torch.cumsum(x.double(), 1) - x.double()     # JAX 0.4.30: [[0, 0, 1, 3], ...]
    assert ys.double().tolist() == want.tolist()


def test_plain_scan_too():
    c, ys = nx.lax.scan(lambda c, a: (c + a, c), 0.0, torch.ones(3, dtype=torch.float16))
    assert ys.dtype == torch.float16 and ys.tolist() == [0.0, 1.0, 2.0]
