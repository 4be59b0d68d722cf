"""GPT-J's model in plain torch — no named axes, no collectives — on the port's parameters.

The per-shard parameter tree (every leaf with a leading ``shard`` axis, as the port's
``init_xmap`` and GPT-J's return it) is assembled into the full model's weights, which
is exactly what the model-parallel layers compute:

- column-split weights (``q``, ``k``, ``v``, ``dense_proj`` and its bias, the
  projection and its bias) are concatenated along their output dim, shard-major (shard
  ``s`` holds heads ``s * heads_per_shard ...``), and the embedding along its input
  (vocabulary) dim;
- row-split weights (``o``, ``dense_proj_o``) are concatenated along their input dim;
- biases added before a ``g_psum`` (the embedding's, ``dense_proj_o``'s) are summed over
  shards;
- the norms use shard 0's scale and offset (``all_gather(scale, 'shard')[0]``).

Autograd through that assembly gives the gradient of every per-shard leaf, the oracle
the port's gradients are checked against in ``make test`` (no JAX needed).  ``train_step``
is one step of the same optimizer (``optim.make_optimizer``) on the stacked tree.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .layers import apply_rotary_pos_emb, fixed_pos_embedding

P = "causal_transformer_shard/~/"


def _cat(t, dim):
    """Concatenate the shard axis (dim 0) into ``dim`` of the per-shard tensor."""
    return torch.cat(list(t), dim=dim)


def layer_norm(x, scale, offset):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return scale[0] * torch.rsqrt(var + 1e-5) * (x - mean) + offset[0]


def example_loss(params, config, ctx, tgt, z_loss=1.0, mask=0.0):
    """Per-token loss and ``correct`` of one example ``ctx``/``tgt``: ``[seq]`` ids."""
    heads, dim = config["n_heads"], config["d_model"]
    dph = dim // heads
    rot = config.get("pe_rotary_dims", dph)
    seq = ctx.shape[0]

    e = params[P + "embedding_shard/~/linear"]
    x = F.one_hot(ctx, config["n_vocab"]).to(e["w"].dtype) @ _cat(e["w"], 0) + e["b"].sum(0)

    causal = torch.tril(torch.ones(seq, seq, dtype=x.dtype))
    bias = -1e10 * (1. - causal) + mask
    for i in range(config["layers"]):
        lp = lambda n: params[f"{P}layer_{i}/~/{n}"]  # noqa: E731
        norm = lp("replicated_layer_norm")
        h = layer_norm(x, norm["scale"], norm["offset"])
        q, v, k = (h @ _cat(lp(n)["w"], 1) for n in ("linear", "linear_1", "linear_2"))
        q, v, k = (t.reshape(seq, heads, dph) for t in (q, v, k))
        sincos = fixed_pos_embedding(k[:, :, :rot])
        q = torch.cat([apply_rotary_pos_emb(q[:, :, :rot], sincos), q[:, :, rot:]], -1)
        k = torch.cat([apply_rotary_pos_emb(k[:, :, :rot], sincos), k[:, :, rot:]], -1)
        logits = torch.einsum("thd,Thd->htT", q, k) / math.sqrt(dph) + bias
        attn = torch.einsum("htT,Thd->thd", logits.softmax(-1), v).reshape(seq, dim)
        attn_out = attn @ _cat(lp("linear_3")["w"], 0)
        d = lp("linear_4")
        dense = F.gelu(h @ _cat(d["w"], 1) + _cat(d["b"], 0), approximate="tanh")
        do = lp("linear_5")
        x = x + attn_out + dense @ _cat(do["w"], 0) + do["b"].sum(0)

    norm = params[P + "projection_shard/~/replicated_layer_norm"]
    h = layer_norm(x, norm["scale"], norm["offset"])
    pr = params[P + "projection_shard/~/linear"]
    logits = h @ _cat(pr["w"], 1) + _cat(pr["b"], 0)
    logits = logits - logits.max(-1, keepdim=True).values.detach()
    log_z = torch.logsumexp(logits, -1)
    predicted = logits.gather(-1, tgt[:, None])[:, 0]
    loss = log_z - predicted + (1e-4 * log_z ** 2 * z_loss).mean()
    return loss, predicted == 0.0


def loss_and_grads(params, config, ctx, tgt):
    """GPT-J's train loss (per-example mean, then mean over the batch) on ``ctx``/``tgt``
    ``[batch, seq]`` and its gradient w.r.t. every per-shard leaf; also each example's
    loss and last-token loss."""
    leaves = {m: {n: t.detach().clone().requires_grad_() for n, t in d.items()}
              for m, d in params.items()}
    losses = [example_loss(leaves, config, c, t)[0] for c, t in zip(ctx, tgt)]
    total = torch.stack([l.mean() for l in losses]).mean()
    total.backward()
    grads = {m: {n: t.grad for n, t in d.items()} for m, d in leaves.items()}
    return (torch.stack([l.mean() for l in losses]).detach(),
            torch.stack([l[-1] for l in losses]).detach(), grads)


def adam_step(params, grads, opt, config, step):
    """``optim.make_optimizer(config)``'s update, on the stacked tree (the per-shard
    global norm is the norm over all shards' leaves; weight decay skips leaves whose
    per-shard rank is 1)."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    gnorm = math.sqrt(sum(float((g ** 2).sum()) for d in grads.values() for g in d.values()))
    scale_clip = 1.0 if gnorm < 1 else 1.0 / gnorm
    w, total, lr, end = config["warmup_steps"], config["anneal_steps"], config["lr"], config["end_lr"]
    warm = min(max(step, 0), w) / w
    anneal = min(max(step - w, 0), total) / total
    lr_t = warm * lr - (lr - end) * (1 - np.cos(np.pi * anneal)) / 2
    new = {}
    for m, d in params.items():
        new[m] = {}
        for n, p in d.items():
            g = grads[m][n] / config["gradient_accumulation_steps"] * scale_clip
            mu, nu = opt.setdefault((m, n), (torch.zeros_like(p), torch.zeros_like(p)))
            mu = (1 - b1) * g + b1 * mu
            nu = (1 - b2) * g ** 2 + b2 * nu
            opt[(m, n)] = (mu, nu)
            u = (mu / (1 - b1 ** (step + 1))) / (torch.sqrt(nu / (1 - b2 ** (step + 1))) + eps)
            if p.dim() > 2:  # len(g.shape) > 1 per shard
                u = u + config["weight_decay"] * p
            new[m][n] = p - lr_t * u
    return new, gnorm


def train(params, config, batches):
    """The losses of ``len(batches)`` training steps (one microbatch each)."""
    opt, out = {}, []
    for step, b in enumerate(batches):
        loss, _, grads = loss_and_grads(params, config, b["obs"][0], b["target"][0])
        out.append(float(loss.mean()))
        params, _ = adam_step(params, grads, opt, config, step)
    return out
