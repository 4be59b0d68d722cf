"""Port of ``mesh_transformer/sampling.py``'s ``softmax_sample`` (GPT-J @ f8315e3), drawing
with the port's explicit keys (``prng.categorical``, the Gumbel-max trick JAX uses)."""
from __future__ import annotations

from . import prng


# takes in a logit distribution, softmax and then sample
def softmax_sample(key, logits, _, temp=1):
    # .astype(jnp.uint32) in the original: torch indexes with int64
    return prng.categorical(key, logits / temp, -1), None
