"""The little of haiku the port needs: modules with haiku's parameter names, made explicit.

GPT-J's layers are haiku modules: ``hk.get_parameter`` creates a parameter the first time
(``init``) and reads it afterwards (``apply``), and the parameters live in a flat dict
``{module_name: {param_name: array}}`` whose names follow the module nesting
(``causal_transformer_shard/~/layer_0/~/linear_1``).  The port keeps that dict — so a
state tree has the same keys as the original's — but passes it explicitly: each module
knows its full name, ``init(key)`` returns its entries, ``__call__(params, ...)`` reads
them.  ``remat`` is ``nx.checkpoint`` (``hk.remat``).
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

import named_axes as nx

from . import prng

remat = nx.checkpoint


class Module:
    def __init__(self, name: str, parent: "Module | None" = None):
        self.name = name if parent is None else f"{parent.name}/~/{name}"

    def init(self, key) -> dict:
        """This module's (and its submodules') parameters, drawn from ``key``."""
        params = {}
        for sub in self.submodules():
            params.update(sub.init(key))
        return params

    def submodules(self):
        return [v for v in vars(self).values() if isinstance(v, Module)] + \
            [m for v in vars(self).values() if isinstance(v, list) for m in v if isinstance(m, Module)]

    def param_key(self, key, param: str):
        # haiku draws each parameter from the next key of a PRNGSequence; the port folds
        # the parameter's full name into the key instead (order-independent, same result)
        return prng.fold_in(key, zlib.crc32(f"{self.name}/{param}".encode()))


class TruncatedNormal:
    """``hk.initializers.TruncatedNormal``."""

    def __init__(self, stddev=1., mean=0.):
        self.stddev, self.mean = stddev, mean

    def __call__(self, key, shape, dtype=torch.float32):
        unscaled = prng.truncated_normal(key, -2., 2., shape, dtype)
        return self.stddev * unscaled + self.mean


class Linear(Module):
    """``hk.Linear``; ``input_size`` is given up front because the port's ``init`` does
    not trace the forward pass (haiku infers it from the first input)."""

    def __init__(self, output_size, input_size, with_bias=True, w_init=None, name="linear",
                 parent=None):
        super().__init__(name, parent)
        self.input_size, self.output_size, self.with_bias = input_size, output_size, with_bias
        self.w_init = w_init or TruncatedNormal(stddev=1. / np.sqrt(input_size))

    def init(self, key):
        p = {"w": self.w_init(self.param_key(key, "w"), (self.input_size, self.output_size))}
        if self.with_bias:
            p["b"] = torch.zeros(self.output_size)
        return {self.name: p}

    def __call__(self, params, inputs):
        p = params[self.name]
        out = inputs @ p["w"]
        if self.with_bias:
            out = out + p["b"]
        return out


def unique_names(prefix: str, n: int):
    """haiku's naming of repeated children: ``linear``, ``linear_1``, ``linear_2``, ..."""
    return [prefix if i == 0 else f"{prefix}_{i}" for i in range(n)]
