"""Which kernel runs a large float32 CPU matmul under ``nx.jit``: timed on this machine.

Torch's BLAS (MKL) and oneDNN each win somewhere.  On one AMD EPYC, MKL's
single-thread sgemm ran at half oneDNN's speed; on another (Zen 3), oneDNN ran the
xmap tutorial's forward product 16% slower than MKL, and needed a copy of a transposed
operand that MKL reads in place.  With a narrow output (``hidden @ w2``: 10 columns)
either library is 3-5x faster computing the transposed product.  So ``nx.jit`` does
not guess: the first time it compiles a product of given sizes, layouts and thread
count, :func:`choose` times each formulation in :data:`FORMS` on random operands of
that kind (the copies a formulation needs included) and keeps the fastest for the
process.  Shapes are static under ``nx.jit``: the choice adds no guard, and the
compiled graph holds the chosen formulation's ops.

>>> import torch
>>> from named_axes.transforms import _matmul_choice as mc
>>> a, b = torch.randn(256, 512), torch.randn(512, 128)
>>> form = mc.choose(a, b)
>>> form in mc.FORMS
True
>>> torch.allclose(mc.FORMS[form](a, b), a @ b, atol=1e-3)
True
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable, Iterator

import torch

__all__ = ["FORMS", "choose", "measured", "emitting_plain", "onednn_mm_op", "TIMED_MATMUL"]

# Products at least this large (m * n * k multiply-adds) are timed; below it every
# external call costs about the same and inductor's own choice stays.
TIMED_MATMUL = 1 << 19
# Time spent per formulation and round, about (a product repeats to fill it); a product
# estimated above _UNTIMED_S (at 20 GMAC/s) is not timed: oneDNN's, else BLAS's.
_ROUND_S = 1e-3
_ROUNDS = 5
_UNTIMED_S = 0.05

_ONEDNN: list = []    # [library, op] once registered; [None, None] without oneDNN
_PLAIN: list = []     # non-empty while a formulation emits a plain aten matmul
_chosen: dict = {}    # (m, k, n, a row-major, b row-major, bias, threads) -> form name


def onednn_mm_op() -> Any:
    """``nx_jit::onednn_mm(a, b, bias) = a @ b (+ bias)`` (2-D, float32, CPU), by oneDNN.

    A plain op (a C++ schema, a Python CPU kernel and a meta kernel) so that inductor
    calls it as an external kernel: torch's own ``mkldnn._linear_pointwise`` has an
    inductor lowering that only takes a constant (frozen) weight.  None when torch has
    no oneDNN.
    """
    if _ONEDNN:
        return _ONEDNN[1]
    linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if linear is None or not torch.backends.mkldnn.is_available():
        _ONEDNN[:] = [None, None]
        return None
    linear = linear.default

    def cpu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear(a, b.t(), bias, "none", [], "")

    def meta(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return a.new_empty((a.shape[0], b.shape[1]))

    lib = torch.library.Library("nx_jit", "DEF")
    lib.define("onednn_mm(Tensor a, Tensor b, Tensor? bias=None) -> Tensor")
    lib.impl("onednn_mm", cpu, "CPU")
    lib.impl("onednn_mm", meta, "Meta")
    _ONEDNN[:] = [lib, torch.ops.nx_jit.onednn_mm.default]
    return _ONEDNN[1]


def emitting_plain() -> bool:
    """Whether a formulation is emitting aten's own matmul (a decomposition of ``mm``
    must then let it through, not decompose it again)."""
    return bool(_PLAIN)


@contextlib.contextmanager
def _plain() -> Iterator[None]:
    _PLAIN.append(True)
    try:
        yield
    finally:
        _PLAIN.pop()


def _row_major(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _blas(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    with _plain():
        if bias is None:
            return torch.ops.aten.mm.default(a, b)
        return torch.ops.aten.addmm.default(bias, a, b)


def _blas_t(a: torch.Tensor, b: torch.Tensor, bias: None = None) -> torch.Tensor:
    with _plain():
        return torch.ops.aten.mm.default(b.t(), a.t()).t().contiguous()


def _onednn(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    # oneDNN copies a non-row-major ``a`` itself; copied in the graph, inductor writes
    # it in that layout from the kernel producing it (or copies it faster, tiled)
    op = onednn_mm_op()
    return op(_row_major(a), b) if bias is None else op(_row_major(a), b, bias.contiguous())


def _onednn_t(a: torch.Tensor, b: torch.Tensor, bias: None = None) -> torch.Tensor:
    return onednn_mm_op()(_row_major(b.t()), a.t()).t().contiguous()


# name -> formulation(a, b, bias=None) of ``a @ b (+ bias)``, each a row-major result;
# the ones ending in ``_t`` compute ``(b.T @ a.T).T`` and take no bias
FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "blas": _blas, "blas_t": _blas_t, "onednn": _onednn, "onednn_t": _onednn_t}


def measured(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a @ b`` (2-D, fake or real) is a product :func:`choose` times."""
    m, k = a.shape
    n = b.shape[1]
    return (a.device.type == "cpu" and a.dtype == torch.float32 and b.dtype == a.dtype
            and b.device == a.device and m * n * k > TIMED_MATMUL
            and _unit_stride(a) and _unit_stride(b))


def _unit_stride(t: torch.Tensor) -> bool:
    return t.stride(-1) == 1 or t.stride(-2) == 1


def choose(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> str:
    """The name of the fastest formulation of ``a @ b (+ bias)`` on this machine.

    ``a`` and ``b`` may be fake: only their sizes and layouts are read.  Timed once per
    process for each (sizes, layouts, bias or not, torch thread count).
    """
    m, k = a.shape
    n = b.shape[1]
    key = (m, k, n, a.stride(-1) == 1, b.stride(-1) == 1, bias is not None,
           torch.get_num_threads())
    if key not in _chosen:
        names = ["blas"] if bias is not None else ["blas", "blas_t"]
        if onednn_mm_op() is not None:
            names += ["onednn"] if bias is not None else ["onednn", "onednn_t"]
        _chosen[key] = _fastest(names, *key[:6])
    return _chosen[key]


def _fastest(names: list, m: int, k: int, n: int, a_rows: bool, b_rows: bool,
             bias: bool) -> str:
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    estimate = m * n * k * 5e-11
    if estimate > _UNTIMED_S:
        return "onednn" if "onednn" in names else "blas"
    # called while a graph is traced: time real tensors, outside every tracing mode
    with unset_fake_temporarily(), _disable_current_modes(), torch.no_grad():
        g = torch.Generator().manual_seed(0)
        a = _operand(m, k, a_rows, g)
        b = _operand(k, n, b_rows, g)
        c = torch.rand(n, generator=g) if bias else None
        calls = {name: (lambda f=FORMS[name]: f(a, b, c)) for name in names}
        reps = max(1, min(50, math.ceil(_ROUND_S / estimate)))
        best = dict.fromkeys(names, math.inf)
        for call in calls.values():
            call()     # first calls set up (oneDNN primitives, MKL buffers)
        for _ in range(_ROUNDS):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(reps):
                    call()
                best[name] = min(best[name], time.perf_counter() - start)
    return min(names, key=best.__getitem__)


def _operand(rows: int, cols: int, row_major: bool, g: torch.Generator) -> torch.Tensor:
    if row_major:
        return torch.rand(rows, cols, generator=g)
    return torch.rand(cols, rows, generator=g).t()
