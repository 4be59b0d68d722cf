"""``nx.lax``: collectives over named axes, slicing and control flow, with the
signatures of ``jax.lax``.

Every named axis is viewed as a ``pmap``'d axis; a value that lacks a name is
replicated along it.  Each collective is a registered op (``named_axes::psum`` …) so
it is differentiable, shows up by name in traced graphs, and can be lowered by a
partitioning engine.

>>> import torch, named_axes as nx
>>> nx.lax.psum(nx.named(torch.ones(3, 2), 'i ...'), 'i')
tensor([3., 3.])
"""
from __future__ import annotations

from ._collectives import all_gather, all_to_all, axis_index, ppermute, pshuffle, psum_scatter
from ._reductions import pmax, pmean, pmin, psum
from ._control import cond, fori_loop, scan, select, stop_gradient, while_loop
from ._choose import clamp, switch
from ._pdot import pdot
from ._slicing import (dynamic_index_in_dim, dynamic_slice, dynamic_slice_in_dim,
                       dynamic_update_index_in_dim, dynamic_update_slice,
                       dynamic_update_slice_in_dim, expand_dims, squeeze)

__all__ = ["psum", "pmean", "pmax", "pmin", "pdot", "pshuffle", "ppermute", "all_gather",
           "all_to_all", "psum_scatter", "axis_index",
           "dynamic_slice", "dynamic_slice_in_dim", "dynamic_index_in_dim",
           "dynamic_update_slice", "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim",
           "squeeze", "expand_dims", "select", "clamp", "stop_gradient", "cond", "switch",
           "fori_loop", "while_loop", "scan"]
