"""GPT-J's xmap program in plain JAX 0.4.30: the oracle for the port (no haiku, no optax).

The same layers, xmaps and collectives as ``mesh_transformer/{layers,transformer_shard,
util}.py`` (GPT-J @ f8315e3), written with explicit parameter pytrees (haiku's flat
``{module_name: {param: array}}`` dict, same names as the port's) instead of haiku, and
the few optax transformations GPT-J chains written out.  Only what the oracle test needs:
``train`` (``value_and_grad`` + ``pmean`` over ``batch`` + the optimizer) and a ``grads``
xmap returning the gradient tree; ``xmap(..., axis_resources={'shard': 'mp', 'batch':
'dp'})`` on a ``('dp', 'mp')`` mesh of CPU devices, or vectorized (``--mesh none``).

Run in the JAX environment (``.venv-jax``), as ``tests/test_gptj_port.py`` does::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 .venv-jax/bin/python \\
        examples/gptj/jax_reference.py IN.npz OUT.npz [--mesh 2x2|1x2|2x1|none] [--x64]

``IN.npz``: ``config`` (JSON text), ``params/<module>/<name>`` (every leaf with a leading
shard axis), ``obs``, ``target`` (``[batch, gas, seq]``).  ``OUT.npz``: ``grads/...``,
``loss``, ``last_loss`` (from the grads xmap, first microbatch), ``train{i}/...`` (the
first four outputs of train step ``i``, ``--steps`` of them) and ``train/params/...``,
``train/step`` (the state after the last step).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def build(config):
    import jax
    import jax.numpy as jnp
    from jax.experimental.maps import xmap

    # ---- util.py ---------------------------------------------------------------------
    def gpt3_schedule(warmup_steps, total_steps, peak_lr, end_lr):
        def sch(step):
            warmup_pct = jnp.clip(step, 0, warmup_steps) / warmup_steps
            anneal_pct = jnp.clip(step - warmup_steps, 0, total_steps) / total_steps

            return warmup_pct * peak_lr - (peak_lr - end_lr) * (1 - jnp.cos(jnp.pi * anneal_pct)) / 2

        return sch

    def global_norm(updates, use_psum=True):
        pre_sqrt = sum([jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(updates)])
        if use_psum:
            pre_sqrt = jax.lax.psum(pre_sqrt, "shard")
        return jnp.sqrt(pre_sqrt)

    class GradientTransformation:
        def __init__(self, init, update):
            self.init, self.update = init, update

    def clip_by_global_norm(max_norm, use_psum=True):
        def update_fn(updates, state, params=None):
            g_norm = global_norm(updates, use_psum=use_psum)
            trigger = g_norm < max_norm
            updates = jax.tree_util.tree_map(
                lambda t: jnp.where(trigger, t, (t / g_norm) * max_norm), updates)
            return updates, state
        return GradientTransformation(lambda _: (), update_fn)

    def additive_weight_decay(weight_decay=0.0):
        def update_fn(updates, state, params):
            updates = jax.tree_util.tree_map(
                lambda g, p: g + weight_decay * p * (len(g.shape) > 1), updates, params)
            return updates, state
        return GradientTransformation(lambda _: (), update_fn)

    @jax.custom_vjp
    def f_psum(x):
        return x

    def f_psum_fwd(x):
        return f_psum(x), None

    def f_psum_bwd(_, g):
        return jax.lax.psum(g, "shard"),

    f_psum.defvjp(f_psum_fwd, f_psum_bwd)

    @jax.custom_vjp
    def g_psum(x):
        return jax.lax.psum(x, "shard")

    def g_psum_fwd(x):
        return g_psum(x), None

    def g_psum_bwd(_, g):
        return g,

    g_psum.defvjp(g_psum_fwd, g_psum_bwd)

    # ---- optax (scale, scale_by_adam, scale_by_schedule, chain, apply_updates) ---------
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
        return GradientTransformation(lambda _: (), lambda u, s, p=None: (
            jax.tree_util.tree_map(lambda g: step_size * g, u), s))

    def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
        def init_fn(params):
            zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
            return {"count": jnp.zeros([], jnp.int32), "mu": zeros, "nu": zeros}

        def update_fn(updates, state, params=None):
            tm = jax.tree_util.tree_map
            mu = tm(lambda g, t: (1 - b1) * g + b1 * t, updates, state["mu"])
            nu = tm(lambda g, t: (1 - b2) * (g ** 2) + b2 * t, updates, state["nu"])
            count_inc = state["count"] + 1
            mu_hat = tm(lambda t: t / (1 - b1 ** count_inc), mu)
            nu_hat = tm(lambda t: t / (1 - b2 ** count_inc), nu)
            updates = tm(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
            return updates, {"count": count_inc, "mu": mu, "nu": nu}
        return GradientTransformation(init_fn, update_fn)

    def scale_by_schedule(step_size_fn):
        def update_fn(updates, state, params=None):
            step_size = step_size_fn(state["count"])
            return (jax.tree_util.tree_map(lambda g: step_size * g, updates),
                    {"count": state["count"] + 1})
        return GradientTransformation(lambda _: {"count": jnp.zeros([], jnp.int32)}, update_fn)

    def apply_updates(params, updates):
        return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)

    scheduler = gpt3_schedule(config["warmup_steps"], config["anneal_steps"], config["lr"], config["end_lr"])
    optimizer = chain(scale(1 / config["gradient_accumulation_steps"]), clip_by_global_norm(1),
                      scale_by_adam(), additive_weight_decay(config["weight_decay"]), scale(-1),
                      scale_by_schedule(scheduler))

    # ---- layers.py (params: haiku's flat dict, passed explicitly) -----------------------
    def linear(params, name, inputs):
        out = jnp.dot(inputs, params[name]["w"])
        if "b" in params[name]:
            out = out + jnp.broadcast_to(params[name]["b"], out.shape)
        return out

    def replicated_layer_norm(params, name, inputs):
        mean = jnp.mean(inputs, axis=-1, keepdims=True)
        variance = jnp.var(inputs, axis=-1, keepdims=True)

        scale = jax.lax.all_gather(params[name]["scale"], "shard")[0]
        offset = jax.lax.all_gather(params[name]["offset"], "shard")[0]

        scale = jnp.broadcast_to(scale, inputs.shape)
        offset = jnp.broadcast_to(offset, inputs.shape)
        mean = jnp.broadcast_to(mean, inputs.shape)

        inv = scale * jax.lax.rsqrt(variance + 1e-5)
        return inv * (inputs - mean) + offset

    def fixed_pos_embedding(x, seq_dim=0):
        dim = x.shape[-1]
        inv_freq = 1. / (10000 ** (np.arange(0, dim, 2) / dim))
        sinusoid_inp = np.einsum('i , j -> i j', np.arange(x.shape[seq_dim]), inv_freq)
        return np.sin(sinusoid_inp), np.cos(sinusoid_inp)

    def rotate_every_two(x):
        x1 = x[:, :, ::2]
        x2 = x[:, :, 1::2]
        x = jnp.stack((-x2, x1), axis=-1)
        return x.reshape(x.shape[:-2] + (-1,))  # rearrange(x, '... d j -> ... (d j)')

    def apply_rotary_pos_emb(x, sincos):
        # repeat(t, 'b n -> b (n j)', j=2)[-x.shape[0]:, None, :]
        sin, cos = map(lambda t: jnp.repeat(t, 2, axis=1)[-x.shape[0]:, None, :], sincos)
        return (x * cos) + (rotate_every_two(x) * sin)

    shards = config["cores_per_replica"]
    heads, dim = config["n_heads"], config["d_model"]
    dim_per_head = dim // heads
    heads_per_shard = heads // shards
    dim_per_shard = dim // shards
    pe_rotary_dims = config.get("pe_rotary_dims", dim_per_head)
    vocab_per_shard = config["n_vocab"] // shards
    P = "causal_transformer_shard/~/"

    def embedding_shard(params, x):
        shard_start_index = jax.lax.axis_index('shard') * vocab_per_shard
        input_onehot = jax.nn.one_hot(x - shard_start_index, vocab_per_shard,
                                      dtype=params[P + "embedding_shard/~/linear"]["w"].dtype)
        proj_out = linear(params, P + "embedding_shard/~/linear", input_onehot)
        return g_psum(proj_out)

    def transformer_layer_shard(params, i, x, attn_bias):
        n = f"{P}layer_{i}/~/"
        x = f_psum(x)
        x = replicated_layer_norm(params, n + "replicated_layer_norm", x)

        shape = x.shape[:-1] + (heads_per_shard, dim_per_head)
        q = linear(params, n + "linear", x).reshape(shape)
        v = linear(params, n + "linear_1", x).reshape(shape)
        k = linear(params, n + "linear_2", x).reshape(shape)

        seq_len = x.shape[0]
        causal_mask = np.tril(np.ones((seq_len, seq_len)))
        bias = -1e10 * (1. - causal_mask)
        bias += attn_bias

        # self_attn
        k_rot, k_pass = k[:, :, :pe_rotary_dims], k[:, :, pe_rotary_dims:]
        q_rot, q_pass = q[:, :, :pe_rotary_dims], q[:, :, pe_rotary_dims:]
        sincos = fixed_pos_embedding(k_rot)
        q_rot = apply_rotary_pos_emb(q_rot, sincos)
        k_rot = apply_rotary_pos_emb(k_rot, sincos)
        k = jnp.concatenate([k_rot, k_pass], axis=-1)
        q = jnp.concatenate([q_rot, q_pass], axis=-1)

        attention_logits = jnp.einsum("thd,Thd->htT", q, k)
        sqrt_key_size = np.sqrt(dim_per_head).astype(k.dtype)
        attention_logits = attention_logits / sqrt_key_size
        attention_logits += bias
        attention_weights = jax.nn.softmax(attention_logits)
        attention_vec = jnp.einsum("htT,Thd->thd", attention_weights, v).reshape((-1, dim_per_shard))
        attn_out = linear(params, n + "linear_3", attention_vec)

        # ff
        dense_proj = jax.nn.gelu(linear(params, n + "linear_4", x))
        dense_out = linear(params, n + "linear_5", dense_proj)

        return g_psum(attn_out + dense_out)

    def projection_shard_loss(params, x, targets, z_loss=1):
        x = f_psum(x)
        x = replicated_layer_norm(params, P + "projection_shard/~/replicated_layer_norm", x)
        logits = linear(params, P + "projection_shard/~/linear", x)

        shard_start_index = jax.lax.axis_index('shard') * vocab_per_shard
        global_max = jax.lax.pmax(jax.lax.stop_gradient(logits.max(-1, keepdims=True)), "shard")
        logits -= jax.lax.stop_gradient(global_max)

        gt_onehot = jax.nn.one_hot(targets - shard_start_index, vocab_per_shard, dtype=logits.dtype)
        predicted_logits = jnp.sum(jnp.multiply(gt_onehot, logits), axis=-1)
        predicted_logits = g_psum(predicted_logits)

        exp_logits = jnp.exp(logits)
        sum_exp_logits = g_psum(exp_logits.sum(axis=-1))

        loss = jnp.log(sum_exp_logits) - predicted_logits
        loss += (1e-4 * jnp.square(jnp.log(sum_exp_logits)) * z_loss).mean()
        correct = (0.0 == predicted_logits)
        return loss, correct

    # ---- transformer_shard.py ------------------------------------------------------------
    def transformer_loss(params, ctx, tgt, z_loss=False, mask=0.0):
        attn_bias = 0
        attn_bias += mask
        x = jax.checkpoint(embedding_shard)(params, ctx)
        for i in range(config["layers"]):
            x = x + jax.checkpoint(transformer_layer_shard, static_argnums=(1,))(params, i, x, attn_bias)
        loss, correct = jax.checkpoint(projection_shard_loss)(params, x, tgt, float(z_loss))
        return {"loss": loss.mean(), "last_loss": loss[-1].mean(), "all_loss": loss, "correct": correct}

    def train_loss(params, x, y):
        out = transformer_loss(params, x, y, z_loss=True)
        return out["loss"], out["last_loss"]

    def train(state, ctx, tgt):
        def microbatch(old_grad, batch):
            ctx, tgt = batch
            val_grad_fn = jax.value_and_grad(train_loss, has_aux=True)
            (loss, last_loss), grad = val_grad_fn(state["params"], ctx, tgt)
            new_grad = jax.tree_util.tree_map(lambda a, b: a + b, old_grad, grad)
            gnorm = global_norm(grad)
            return new_grad, (loss, last_loss, gnorm)

        if ctx.shape[0] == 1:
            val_grad_fn = jax.value_and_grad(train_loss, has_aux=True)
            (loss, last_loss), grad = val_grad_fn(state["params"], ctx[0], tgt[0])
            gnorm = global_norm(grad)
        else:
            grad, (loss, last_loss, gnorm) = jax.lax.scan(
                microbatch, jax.tree_util.tree_map(jnp.zeros_like, state["params"]), (ctx, tgt))

        grad_norm_micro = jax.lax.pmean(gnorm, "batch")
        grad = jax.lax.pmean(grad, "batch")
        grad_norm = global_norm(grad)
        updates, new_opt_state = optimizer.update(grad, state["opt_state"], state["params"])
        return loss, last_loss, grad_norm, grad_norm_micro, {
            "params": apply_updates(state["params"], updates),
            "step": state["step"] + 1,
            "opt_state": new_opt_state,
        }

    def grads(state, ctx, tgt):
        val_grad_fn = jax.value_and_grad(train_loss, has_aux=True)
        (loss, last_loss), grad = val_grad_fn(state["params"], ctx[0], tgt[0])
        return loss, last_loss, jax.lax.pmean(grad, "batch")

    def xmaps(axis_resources):
        train_xmap = xmap(train, in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                          out_axes=(["batch", ...], ["batch", ...], ["batch", ...], ["batch", ...],
                                    ["shard", ...]),
                          donate_argnums=(0,), axis_resources=axis_resources)
        grad_xmap = xmap(grads, in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                         out_axes=(["batch", ...], ["batch", ...], ["shard", ...]),
                         axis_resources=axis_resources)
        return train_xmap, grad_xmap

    def init_opt_state(params):
        # optimizer.init, with the leading shard axis the init xmap's out_axes would add
        state = optimizer.init(jax.tree_util.tree_map(lambda p: p[0], params))
        return jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x, (shards,) + x.shape), state)

    return xmaps, init_opt_state


def _unflatten(flat, prefix):
    out = {}
    for k, v in flat.items():
        if k.startswith(prefix):
            module, name = k[len(prefix):].rsplit("/", 1)
            out.setdefault(module, {})[name] = v
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--mesh", default="2x2", help="dp x mp mesh, or 'none' (vectorized)")
    ap.add_argument("--x64", action="store_true", help="enable float64 (jax_enable_x64)")
    ap.add_argument("--steps", type=int, default=2, help="train_xmap steps")
    args = ap.parse_args(argv)

    import jax
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.sharding import Mesh

    data = dict(np.load(args.inp))
    config = json.loads(str(data["config"]))
    params = jax.tree_util.tree_map(jnp.asarray, _unflatten(data, "params/"))
    obs, target = jnp.asarray(data["obs"]), jnp.asarray(data["target"])

    xmaps, init_opt_state = build(config)
    shards = config["cores_per_replica"]
    state = {"params": params, "step": jnp.zeros([shards], jnp.int32),
             "opt_state": init_opt_state(params)}

    if args.mesh == "none":
        resources, mesh = {}, None
    else:
        dp, mp = (int(s) for s in args.mesh.split("x"))
        devices = np.array(jax.devices()[:dp * mp]).reshape(dp, mp)
        resources, mesh = {'shard': 'mp', 'batch': 'dp'}, Mesh(devices, ('dp', 'mp'))
    train_xmap, grad_xmap = xmaps(resources)

    out = {}
    if mesh is not None:
        mesh.__enter__()
    loss, last_loss, grads = grad_xmap(state, obs, target)
    out["loss"], out["last_loss"] = np.asarray(loss), np.asarray(last_loss)
    for m, d in grads.items():
        for n, g in d.items():
            out[f"grads/{m}/{n}"] = np.asarray(g)
    for step in range(args.steps):  # GPT-J's lr is 0 at step 0: the 2nd step moves
        results = train_xmap(state, obs, target)
        for name, r in zip(["loss", "last_loss", "grad_norm", "grad_norm_micro"], results[:4]):
            out[f"train{step}/{name}"] = np.asarray(r)
        state = results[4]
    for m, d in state["params"].items():
        for n, p in d.items():
            out[f"train/params/{m}/{n}"] = np.asarray(p)
    out["train/step"] = np.asarray(state["step"])
    if mesh is not None:
        mesh.__exit__(None, None, None)
    np.savez(args.out, **out)
    print(f"jax {jax.__version__}, mesh {args.mesh}, x64 {args.x64}: loss {out['loss'].mean():.6f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
