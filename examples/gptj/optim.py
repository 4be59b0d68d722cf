"""The optax transformations GPT-J's ``device_train.py`` chains, in torch (no optax):

    optax.chain(optax.scale(1 / gradient_accumulation_steps), clip_by_global_norm(1),
                optax.scale_by_adam(), additive_weight_decay(weight_decay),
                optax.scale(-1), optax.scale_by_schedule(gpt3_schedule(...)))

``make_optimizer(config)`` builds it.  Each transformation is written as optax writes it
(same state layout: adam keeps ``count``, ``mu``, ``nu``; the schedule a ``count``), and
runs per instance inside the train xmap, so ``clip_by_global_norm`` ``psum``s the norm
over ``shard`` as in GPT-J.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from .util import GradientTransformation, additive_weight_decay, clip_by_global_norm, gpt3_schedule


def chain(*args):
    def init_fn(params):
        return tuple(t.init(params) for t in args)

    def update_fn(updates, state, params=None):
        new_state = []
        for s, t in zip(state, args):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init_fn, update_fn)


def scale(step_size):
    return GradientTransformation(lambda _: (),
                                  lambda updates, state, params=None:
                                  (tree_map(lambda g: step_size * g, updates), state))


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    def init_fn(params):
        mu = tree_map(torch.zeros_like, params)
        nu = tree_map(torch.zeros_like, params)
        return {"count": torch.zeros([], dtype=torch.int32), "mu": mu, "nu": nu}

    def update_fn(updates, state, params=None):
        mu = tree_map(lambda g, t: (1 - b1) * g + b1 * t, updates, state["mu"])
        nu = tree_map(lambda g, t: (1 - b2) * (g ** 2) + b2 * t, updates, state["nu"])
        count_inc = state["count"] + 1
        mu_hat = tree_map(lambda t: t / (1 - b1 ** count_inc), mu)
        nu_hat = tree_map(lambda t: t / (1 - b2 ** count_inc), nu)
        updates = tree_map(lambda m, v: m / (torch.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, {"count": count_inc, "mu": mu, "nu": nu}

    return GradientTransformation(init_fn, update_fn)


def scale_by_schedule(step_size_fn):
    def init_fn(params):
        return {"count": torch.zeros([], dtype=torch.int32)}

    def update_fn(updates, state, params=None):
        step_size = step_size_fn(state["count"])
        updates = tree_map(lambda g: step_size * g, updates)
        return updates, {"count": state["count"] + 1}

    return GradientTransformation(init_fn, update_fn)


def apply_updates(params, updates):
    return tree_map(lambda p, u: p + u, params, updates)


def make_optimizer(config):
    """device_train.py's optimizer for ``config`` (gradient_accumulation_steps,
    weight_decay, warmup_steps, anneal_steps, lr, end_lr)."""
    scheduler = gpt3_schedule(config["warmup_steps"], config["anneal_steps"], config["lr"], config["end_lr"])
    return chain(
        scale(1 / config["gradient_accumulation_steps"]),
        clip_by_global_norm(1),
        scale_by_adam(),
        additive_weight_decay(config["weight_decay"]),
        scale(-1),
        scale_by_schedule(scheduler),
    )
