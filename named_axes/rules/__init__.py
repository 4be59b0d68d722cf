"""The named rules of torch ops, declared into the op registry (:mod:`named_axes._registry`).

One module per family: ``pointwise`` (the elementwise tables and kernel), ``reductions``
and ``dimwise`` (dim arguments that may name axes), ``shape`` (views, indexing,
concatenation), ``queries`` (metadata, ``new_*``, refused relayouts, ``equal``),
``autograd``, ``matmul``, ``nn`` (``torch.nn.functional``) and ``named_ints`` (an integer
argument that varies per instance).  A function no module declares runs under the
dispatcher's vmap fallback.

>>> import torch
>>> from named_axes._registry import RECORDS
>>> RECORDS[torch.Tensor.sum].kind, RECORDS[torch.softmax].kind
('reduction', 'dimwise')
"""
from __future__ import annotations

from . import autograd, dimwise, matmul, named_ints, nn, pointwise, queries, reductions, shape

__all__ = ["install"]


def install() -> None:
    """Declare every family's rules (once, at import of named_axes)."""
    for family in (pointwise, reductions, dimwise, shape, queries, autograd, matmul, nn,
                   named_ints):
        family.install()
