"""Transformations of named programs, built on torch.func and torch.fx.

vmap with axis names, the grad family with ``reduce_axes``, custom derivative rules,
rematerialization, abstract evaluation, graphs, compilation and gufunc vectorization.
Autodiff and batching are torch.func's; this package only carries names across.
"""
from __future__ import annotations

from ._vmap import vectorize, vmap
from ._forward import hessian, jacfwd, jacrev, jvp, linearize
from ._grad import grad, linear_transpose, value_and_grad, vjp
from ._graph import NamedGraphModule, make_graph, named_call
from ._jit import disable_jit, jit
from ._store import set_program_store
from ._custom import closure_convert, custom_jvp, custom_vjp
from ._remat import checkpoint, remat
from ._shapes import ShapeDtypeStruct, eval_shape

__all__ = ["vmap", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev",
           "hessian", "linear_transpose", "make_graph", "named_call", "NamedGraphModule",
           "jit", "disable_jit", "set_program_store", "custom_vjp", "custom_jvp", "closure_convert",
           "checkpoint", "remat", "ShapeDtypeStruct", "eval_shape", "vectorize"]
