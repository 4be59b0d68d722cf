"""Port of ``mesh_transformer/util.py`` (GPT-J, kingoflolz/mesh-transformer-jax @ f8315e3).

The collective helpers the model-parallel layers are built from — ``f_psum`` (identity
forward, ``psum`` backward) and ``g_psum`` (``psum`` forward, identity backward), the
custom-VJP pair Megatron calls *f* and *g* — and the optimizer pieces GPT-J adds to optax
(``global_norm`` with a ``psum`` over ``shard``, ``clip_by_global_norm``,
``additive_weight_decay``, ``gpt3_schedule``), written against ``named_axes`` exactly as
the original is written against ``jax``.

Differences from the original, each for a reason:

- ``maybe_shard`` (``with_sharding_constraint``) is left out: it is only used by the V2
  layers, which this port does not cover (they are pjit code, not xmap code).
- ``to_bf16`` casts to ``COMPUTE_DTYPE`` (float32 by default, not bfloat16): the oracle
  test compares against JAX to 1e-5, and bf16 matmuls on CPU would make that meaningless.
  Setting ``util.COMPUTE_DTYPE = torch.bfloat16`` gives the original behaviour.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves, tree_map

import named_axes as nx
from named_axes import lax

# GPT-J computes in bfloat16 (``to_bf16(state["params"])``); see the module docstring.
COMPUTE_DTYPE = torch.float32


def gpt3_schedule(warmup_steps, total_steps, peak_lr, end_lr):
    def sch(step):
        warmup_pct = torch.clip(step, 0, warmup_steps) / warmup_steps
        anneal_pct = torch.clip(step - warmup_steps, 0, total_steps) / total_steps

        return warmup_pct * peak_lr - (peak_lr - end_lr) * (1 - torch.cos(torch.pi * anneal_pct)) / 2

    return sch


def global_norm(updates, use_psum=True):
    pre_sqrt = sum([torch.sum(torch.square(x)) for x in tree_leaves(updates)])
    if use_psum:
        pre_sqrt = lax.psum(pre_sqrt, "shard")
    return torch.sqrt(pre_sqrt)


class GradientTransformation:
    """optax's ``GradientTransformation``: an ``(init, update)`` pair (the port does not
    depend on optax; ``optim.py`` has the few transformations GPT-J chains)."""

    def __init__(self, init, update):
        self.init = init
        self.update = update


def clip_by_global_norm(max_norm, use_psum=True) -> GradientTransformation:
    """Clip updates using their global norm (the norm is ``psum``'d over ``shard``)."""

    def init_fn(_):
        return ()  # ClipByGlobalNormState: stateless

    def update_fn(updates, state, params=None):
        del params
        g_norm = global_norm(updates, use_psum=use_psum)
        trigger = g_norm < max_norm
        updates = tree_map(
            lambda t: torch.where(trigger, t, (t / g_norm) * max_norm), updates)
        return updates, state

    return GradientTransformation(init_fn, update_fn)


def additive_weight_decay(weight_decay: float = 0.0) -> GradientTransformation:
    """Add parameter scaled by `weight_decay`, to all parameters with more than one dim
    (i.e. exclude ln, bias etc) — ``g.shape`` is the per-shard positional shape, as in
    the original."""

    def init_fn(_):
        return ()  # AdditiveWeightDecayState: stateless

    def update_fn(updates, state, params):
        updates = tree_map(lambda g, p: g + weight_decay * p * (len(g.shape) > 1), updates, params)
        return updates, state

    return GradientTransformation(init_fn, update_fn)


def to_f32(t):
    return tree_map(lambda x: x.to(torch.float32) if _is_float(x) else x, t)


def to_bf16(t):
    # the original: float32 -> bfloat16; here float -> COMPUTE_DTYPE (module docstring)
    return tree_map(lambda x: x.to(COMPUTE_DTYPE) if _is_float(x) else x, t)


def _is_float(x):
    return isinstance(x, torch.Tensor) and x.dtype.is_floating_point


# identity in forward pass, psum in backward
@nx.custom_vjp
def f_psum(x):
    return x


def f_psum_fwd(x):
    return f_psum(x), None


def f_psum_bwd(_, g):
    return lax.psum(g, "shard"),


f_psum.defvjp(f_psum_fwd, f_psum_bwd)


# identity in forward pass, pmean in backward
@nx.custom_vjp
def f_pmean(x):
    return x


def f_pmean_fwd(x):
    return f_psum(x), None


def f_pmean_bwd(_, g):
    return lax.pmean(g, "shard"),


f_pmean.defvjp(f_pmean_fwd, f_pmean_bwd)


# psum in forward pass, identity in backward
@nx.custom_vjp
def g_psum(x):
    return lax.psum(x, "shard")


def g_psum_fwd(x):
    return g_psum(x), None


def g_psum_bwd(_, g):
    return g,


g_psum.defvjp(g_psum_fwd, g_psum_bwd)


# print but only on the first node
def head_print(*args, **kwargs):
    if nx.process_index() == 0:
        print(*args, **kwargs)
