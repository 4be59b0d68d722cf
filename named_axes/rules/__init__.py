"""The named rules of torch ops, declared into the op registry (:mod:`named_axes._registry`).

One module per family: ``pointwise`` (tables of elementwise ops), ``reductions`` (dim
arguments that name axes), ``dimwise`` (softmax-like ops along a dim), ``shape``
(views, indexing, concatenation), ``queries`` (metadata, ``new_*``, refused in-place
relayouts), ``autograd`` (``backward``, hooks, ``autograd.grad``), ``matmul``, ``nn``
(``torch.nn.functional``), ``named_ints`` (``roll``/``narrow``/``gather``/
``index_select`` with a named integer argument: one integer per instance) and ``whole``
(``equal``/``allclose``: one Python value about whole tensors).
A function no module declares runs under the dispatcher's vmap fallback.  Each
module only declares :class:`~named_axes._registry.OpRule`s; the direct bindings are
made from the registry afterwards (rules -> registry -> bindings).

>>> import torch
>>> from named_axes._registry import RECORDS
>>> RECORDS[torch.Tensor.sum].kind, RECORDS[torch.softmax].kind
('reduction', 'dimwise')
"""
from __future__ import annotations

from . import (autograd, dimwise, matmul, named_ints, nn, pointwise, queries, reductions, shape,
               whole)

__all__ = ["install"]


def install() -> None:
    """Declare every family's rules (once, at import of named_axes)."""
    for family in (pointwise, reductions, dimwise, shape, queries, autograd, matmul, nn,
                   named_ints, whole):
        family.install()
