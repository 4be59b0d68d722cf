"""What the ports of JAX's pmap_test.py share: its arange inputs and a dtype-blind compare
(JAX's tests compare float32 results against numpy's float64 ones)."""
from __future__ import annotations

import math

import torch


def arange(*shape, dtype=torch.float32):
    return torch.arange(math.prod(shape), dtype=dtype).reshape(shape)


def close(got, want, **kw):
    if not isinstance(want, (tuple, list, dict)):
        got, want = torch.as_tensor(got), torch.as_tensor(want)
    torch.testing.assert_close(got, want, check_dtype=False, **kw)
