"""Transformations of named programs, built on torch.func and torch.fx.

vmap with axis names, the grad family with ``reduce_axes``, custom derivative rules,
rematerialization, abstract evaluation, graphs, compilation and gufunc vectorization.
Autodiff and batching are torch.func's; this package only carries names across.
"""
from __future__ import annotations

from ._vmap import vmap
from ._grad import (grad, hessian, jacfwd, jacrev, jvp, linear_transpose, linearize,
                    value_and_grad, vjp)
from ._graph import NamedGraphModule, make_graph, named_call
from ._jit import disable_jit, jit

__all__ = ["vmap", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev",
           "hessian", "linear_transpose", "make_graph", "named_call", "NamedGraphModule",
           "jit", "disable_jit"]
