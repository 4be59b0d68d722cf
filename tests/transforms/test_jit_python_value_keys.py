"""nx.jit bakes Python values into its traces (static arguments, Python numbers among
the arguments), so calls with values that compare equal but trace differently -- ``1``,
``1.0`` and ``True``, or ``0.0`` and ``-0.0`` -- each get their own program, as JAX's
jit keys a static argument on its type."""
from __future__ import annotations

import torch

import named_axes as nx


def test_static_int_float_bool_trace_apart():
    f = nx.jit(lambda x, s: x + torch.full((2,), s), static_argnums=1, backend="eager")
    x = torch.zeros(2, dtype=torch.int64)
    assert f(x, 1).dtype == torch.int64
    assert f(x, 1.0).dtype == (x + torch.full((2,), 1.0)).dtype == torch.float32
    assert f(x, True).dtype == torch.int64
    assert f.cache_size() == 3


def test_negative_zero_argument():
    x = torch.ones(2)
    want = 1 / (x * -0.0)
    for static in ((), 1):
        f = nx.jit(lambda x, s: 1 / (x * s), static_argnums=static, backend="eager")
        assert torch.equal(f(x, 0.0), 1 / (x * 0.0))
        assert torch.equal(f(x, -0.0), want)
