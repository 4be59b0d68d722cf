"""``import named_axes`` (and using it) leaves torch as it was; the two opt-ins that
change torch do so only when called, and undo exactly what they did."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import named_axes as nx

_SNAPSHOT = r"""
import sys, operator, torch, torch.func
from torch.utils.data._utils import collate
def snapshot():
    import torch._dynamo.variables.builtin as b
    b.populate_builtin_to_tensor_fn_map()
    return (
        {n: getattr(torch.func, n) for n in dir(torch.func) if not n.startswith('_')},
        torch.vmap,
        dict(b.BUILTIN_TO_TENSOR_RFN_MAP), dict(b.BUILTIN_TO_TENSOR_FN_MAP),
        dict(b.BuiltinVariable._binops()),
        dict(collate.default_collate_fn_map),
    )
meta_path = list(sys.meta_path)
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_import_and_use_leave_torch_as_it_was():
    out = _run(_SNAPSHOT + r"""
before = snapshot()
import named_axes as nx
f = nx.xmap(lambda x: nx.grad(lambda w: (x * w).sum())(torch.ones(3)),
            in_axes=['b', ...], out_axes=['b', ...])
f(torch.ones(2, 3))
nx.jit(lambda x: (x.sin() ** 2).sum(), backend='eager')(torch.ones(2))
torch.compile(nx.xmap(lambda x: x * 2, in_axes=['b', ...], out_axes=['b', ...]),
              fullgraph=True, backend='eager')(torch.ones(2, 3))
print(snapshot() == before, sys.meta_path == meta_path)
""")
    assert out.split() == ["True", "True"]


def test_the_opt_ins_change_torch_and_undo_exactly_that():
    out = _run(_SNAPSHOT + r"""
import named_axes as nx
before = snapshot()
nx.enable_torch_func(); nx.enable_dynamo_matmul()
during = snapshot()
nx.disable_torch_func(); nx.disable_dynamo_matmul()
print(during != before, snapshot() == before)
""")
    assert out.split() == ["True", "True"]


def test_torch_func_grad_inside_a_named_program_refuses_without_the_opt_in():
    # a closure brings the named x into torch's grad of a plain w: torch would give
    # the sum over instances, JAX one cotangent per instance
    w = torch.zeros(2)
    f = nx.xmap(lambda x: torch.func.grad(lambda w: (x * w).sum())(w),
                in_axes=["b", ...], out_axes=["b", ...])
    x = torch.tensor([[1., 2.], [3., 4.]])
    with pytest.raises(nx.AxisTypeError, match=r"torch.func.grad on named values.*nx.grad"):
        f(x)
    with pytest.raises(nx.AxisTypeError, match=r"torch.func.jvp on named values"):
        nx.xmap(lambda x: torch.func.jvp(lambda w: x * w, (w,), (w,))[1],
                in_axes=["b", ...], out_axes=["b", ...])(x)
    # a named argument: torch's own transforms take tensors only
    g = nx.xmap(lambda x, w: torch.func.grad(lambda w: (x * w).sum())(w),
                in_axes=(["b", ...], [...]), out_axes=["b", ...])
    with pytest.raises(ValueError, match="must be Tensor"):
        g(x, w)
    nx.enable_torch_func()
    try:
        torch.testing.assert_close(f(x), x)   # per instance, as nx.grad
        torch.testing.assert_close(g(x, w), x)
    finally:
        nx.disable_torch_func()


def test_torch_func_around_a_named_program_is_plain_differentiation():
    f = nx.xmap(lambda x, w: (x * w).sum(), in_axes=(["b", ...], [...]), out_axes=["b"])
    x = torch.tensor([[1., 2.], [3., 4.]])
    g = torch.func.grad(lambda w: f(x, w).sum())(torch.zeros(2))
    torch.testing.assert_close(g, x.sum(0))
    v = torch.func.vmap(lambda w: f(x, w))(torch.ones(3, 2))
    torch.testing.assert_close(v, (x.sum(1)).expand(3, 2))


def test_named_matmul_under_dynamo_refuses_without_the_opt_in():
    import torch._dynamo

    w = torch.randn(3, 4)
    f = nx.xmap(lambda x: x @ w, in_axes=["b", ...], out_axes=["b", ...])
    x = torch.randn(2, 3)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"nx.enable_dynamo_matmul\(\)"):
        torch.compile(f, fullgraph=True, backend="eager")(x)
    g = nx.xmap(lambda x: torch.matmul(x, w), in_axes=["b", ...], out_axes=["b", ...])
    torch.testing.assert_close(torch.compile(g, fullgraph=True, backend="eager")(x), x @ w)
    nx.enable_dynamo_matmul()
    try:
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="eager")(x), x @ w)
    finally:
        nx.disable_dynamo_matmul()
        torch._dynamo.reset()


def test_named_at_named_under_dynamo_is_never_a_swapped_product():
    # both operands NamedTensors (in_axes {} makes w one): dynamo swaps them too; without
    # the opt-in the product refuses (fullgraph) or runs eagerly (a graph break).  A body
    # that reads no tensor from outside is one node of dynamo's graph (_xmap_graph):
    # dynamo never traces its `@`, and the product is right.  Closing over a tensor
    # makes dynamo trace the body.
    import torch._dynamo

    one = torch.ones(())
    body = lambda x, w: nx.lax.pmean(((x @ w).tanh()).pow(2).sum(), 'b')   # noqa: E731
    kw = dict(in_axes=(["b", ...], {}), out_axes=[...])
    traced = nx.xmap(lambda x, w: body(x, w) * one, **kw)
    opaque = nx.xmap(body, **kw)
    x, w = torch.randn(5, 4), torch.randn(4, 3)
    torch._dynamo.reset()
    # (dynamo's own refusal of `named @ named`, or ours of the swapped call it leads to;
    # torch 2.9's dynamo words it as a graph break inside a context manager)
    with pytest.raises(Exception):
        torch.compile(traced, fullgraph=True, backend="eager")(x, w)
    for f in (traced, opaque):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend="eager")(x, w), f(x, w))
    for backend in ("eager", "inductor"):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(opaque, fullgraph=True, backend=backend)(x, w),
                                   opaque(x, w))
    torch._dynamo.reset()
