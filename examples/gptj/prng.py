"""A small counter-based PRNG with explicit keys: the port's stand-in for ``jax.random``.

GPT-J threads ``jax.random`` keys through its xmaps (``init_xmap`` takes one key per
``shard``, ``generate_xmap`` one per ``batch`` element) and draws with them inside the
named program, so each instance's draws depend on its own key only.  torch's generators
are global state, so the port hashes ``(key, counter)`` instead: a key is an int64
tensor ``[2]`` holding two 32-bit words (the shape of a JAX ``uint32[2]`` key), and every
draw is a pure function of its key — the same in every mode (vectorized, SerialLoop,
DTensor), as JAX's draws are.  Keys may be NamedTensors (one key per instance).
"""
from __future__ import annotations

import math

import torch

_M = 0xFFFFFFFF


def _mix(x):
    """lowbias32 (a 32-bit integer hash) on int64 tensors holding 32-bit values."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M
    return x ^ (x >> 16)


def PRNGKey(seed: int) -> torch.Tensor:
    return torch.tensor([(seed >> 32) & _M, seed & _M], dtype=torch.int64)


def _bits(key, counter):
    h = _mix(_mix(key[..., 0]) ^ key[..., 1])
    return _mix(_mix(h ^ counter) ^ 0x5BD1E995)


def split(key, num: int = 2):
    """``jax.random.split``: ``num`` new keys, shape ``[num, 2]``."""
    c = torch.arange(2 * num, dtype=torch.int64).reshape(num, 2)
    return _bits(key[..., None, :], c)


def uniform(key, shape, dtype=torch.float32, minval=0., maxval=1.):
    n = math.prod(shape)
    c = torch.arange(n, dtype=torch.int64).reshape(shape)
    k = key.reshape(tuple(key.shape[:-1]) + (1,) * len(shape) + (2,))
    u = (_bits(k, c) >> 8).to(dtype) * (1.0 / (1 << 24))
    return minval + (maxval - minval) * u


def truncated_normal(key, lower, upper, shape, dtype=torch.float32):
    """``jax.random.truncated_normal`` (inverse-CDF sampling, as JAX does)."""
    sqrt2 = math.sqrt(2.)
    a, b = math.erf(lower / sqrt2), math.erf(upper / sqrt2)
    u = uniform(key, shape, torch.float64, a, b)
    out = sqrt2 * torch.erfinv(u)
    return torch.clamp(out, lower, upper).to(dtype)


def categorical(key, logits, axis=-1):
    """``jax.random.categorical``: the Gumbel-max trick, as JAX does it."""
    u = uniform(key, tuple(logits.shape), logits.dtype, torch.finfo(logits.dtype).tiny, 1.)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=axis)


def fold_in(key, data: int):
    """``jax.random.fold_in``: a new key from ``key`` and an integer."""
    c = torch.tensor([2 * data, 2 * data + 1], dtype=torch.int64) & _M
    return _bits(key, c)
