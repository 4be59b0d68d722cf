"""A jitted call made under another torch global state (default dtype, autocast) runs
the program traced for that state: traces bake it in (``torch.ones`` takes the default
dtype, autocast inserts casts), as eager code reads it on every call."""
from __future__ import annotations

import torch

import named_axes as nx


def test_default_dtype_change_retraces():
    f = nx.jit(lambda x: x + torch.ones(2))
    x = torch.zeros(2)
    assert f(x).dtype == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = f(x)
        assert out.dtype == (x + torch.ones(2)).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert f(x).dtype == torch.float32


def test_autocast_on_then_off():
    f = nx.jit(lambda x, w: x @ w, backend="eager")
    x, w = torch.randn(2, 2), torch.randn(2, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert f(x, w).dtype == torch.bfloat16
    out = f(x, w)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x @ w)


def test_named_program_under_autocast_off_then_on():
    f = nx.jit(nx.xmap(lambda x, w: x @ w, in_axes=(['b', ...], {}), out_axes=['b', ...]))
    x, w = torch.randn(3, 2, 2), torch.randn(2, 2)
    assert f(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert f(x, w).dtype == torch.bfloat16
    assert f(x, w).dtype == torch.float32
