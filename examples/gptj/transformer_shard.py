"""Port of ``mesh_transformer/transformer_shard.py`` (GPT-J @ f8315e3): the model and its
five xmaps.

``CausalTransformerShard`` is the per-instance model (embedding, layers, projection);
``CausalTransformer`` wraps it in GPT-J's xmaps, with the original signatures:

==============  ==================================================  ==================
xmap            in_axes                                             out_axes
==============  ==================================================  ==================
init_xmap       (["shard", ...], ["batch", ...])                    ["shard", ...]
eval_xmap       (["shard", ...], ["batch", ...] x 3)                ["batch", ...]
train_xmap      (["shard", ...], ["batch", ...] x 2)                (["batch", ...] x 4,
                donate_argnums=(0,)                                  ["shard", ...])
generate_xmap   (["shard", ...], ["batch", ...] x 5)                ["batch", ...]
move_xmap       (["shard", ...], ["batch", ...])                    ["shard", ...]
==============  ==================================================  ==================

all with ``axis_resources={'shard': 'mp', 'batch': 'dp'}`` by default (or any other
resources, e.g. ``{'batch': nx.SerialLoop(2)}``, or ``None``: vectorized).  The whole
state (params, step, optimizer state) carries a leading ``shard`` axis; the data a
leading ``batch`` axis.

Differences from the original, each commented where it happens:
- haiku's ``transform``/``init``/``apply`` become explicit ``params`` (see ``hk.py``);
- the number of shards is ``config["cores_per_replica"]``, not read from the mesh: in
  named_axes a named axis may be larger than the mesh axis it is mapped to (it must be
  divisible by it), so the same 2-shard model runs on 1, 2 or 4 devices;
- ``jax.lax.scan`` (gradient accumulation over microbatches, the sampling loop) is a
  Python loop stacking the per-step outputs;
- ``generate`` returns ``(final_token_and_key, outputs)`` without the per-layer decode
  state: that state carries ``shard`` (each shard's heads), and ``out_axes=["batch",
  ...]`` does not place ``shard`` — JAX >= 0.2.17 refuses such an output, as named_axes
  does (GPT-J ran on JAX 0.2.12, which did not check);
- the ``sampler`` draws with ``prng`` keys (``jax.random`` keys in the original).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils._pytree import tree_leaves, tree_map

import named_axes as nx
from named_axes import lax

from . import hk, optim, prng
from .layers import EmbeddingShard, ProjectionShard, TransformerLayerShard
from .util import global_norm, head_print, to_bf16, to_f32

# GPT-J: axis_resources={'shard': 'mp', 'batch': 'dp'} on a ('dp', 'mp') mesh
MESH_RESOURCES = {'shard': 'mp', 'batch': 'dp'}


class CausalTransformerShard(hk.Module):
    def __init__(self, config, name="causal_transformer_shard"):
        super().__init__(name)
        heads = config["n_heads"]
        shards = config["cores_per_replica"]
        layer_count = config["layers"]

        self.transformer_layers = []
        self.heads = heads

        self.heads_per_shard = heads // shards

        self.embed = EmbeddingShard(config, parent=self)

        init_scale = 2. / layer_count

        for i in range(layer_count):
            self.transformer_layers.append(TransformerLayerShard(config, name=f"layer_{i}", init_scale=init_scale,
                                                                 parent=self))

        self.proj = ProjectionShard(config, parent=self)

        if config["pe"] == "t5":
            raise NotImplementedError("RelativePositionEmbs: not ported (GPT-J-6B uses rotary)")
        self.rpe = None

    def eval(self, params, context, target, z_loss=0., mask=0.0):
        input_len = context.shape[0]

        attn_bias = 0  # self.rpe is None

        attn_bias = attn_bias + mask

        x = hk.remat(self.embed)(params, context)

        for l in self.transformer_layers:
            x = x + hk.remat(l)(params, x, attn_bias)

        return hk.remat(self.proj.loss)(params, x, target, z_loss)

    def loss(self, params, ctx, tgt, z_loss=False, mask=0.0):
        loss, correct = self.eval(params, ctx, tgt, float(z_loss), mask=mask)

        return {
            "loss": loss.mean(),
            "last_loss": loss[-1].mean(),
            "all_loss": loss,
            "correct": correct
        }

    def generate_initial(self, params, context, length):
        # slice last token off the context (we use that in generate_once to generate the first new token)
        last = context[-1:]
        context = context[:-1]

        attn_bias = 0  # self.rpe is None

        x = self.embed(params, context)

        states = []

        for l in self.transformer_layers:
            res, layer_state = l.get_init_decode_state(params, x, length - 1, attn_bias)
            x = x + res
            states.append(layer_state)

        # (..., hk.next_rng_key()): the port's generate passes its key explicitly
        return self.proj(params, x), (last.to(torch.int64), states)

    def generate_once(self, params, new_tok, state):
        attn_bias = 0  # self.rpe is None

        x = self.embed(params, new_tok)

        new_states = []

        for l, s in zip(self.transformer_layers, state):
            res, layer_state = l.decode_once(params, s, x, attn_bias)
            x = x + res
            new_states.append(layer_state)

        return self.proj(params, x), new_states


class CausalTransformer:
    def __init__(self, config, axis_resources=MESH_RESOURCES, init=True, jit=False):
        self.config = config
        optimizer = config["optimizer"]

        def eval(state, ctx, tgt, ctx_length):
            def eval_loss_fn(params, x, y, mask):
                transformer = CausalTransformerShard(config)
                return transformer.loss(params, x, y, mask=mask)

            mask = (torch.arange(0, len(ctx)) > ctx_length) * -1e10

            return eval_loss_fn(to_bf16(state["params"]), ctx, tgt, mask)

        def train_loss_fn(params, x, y):
            transformer = CausalTransformerShard(config)
            out = transformer.loss(params, x, y, z_loss=True)

            return out["loss"], out["last_loss"]

        def train(state, ctx, tgt):
            def microbatch(old_grad, batch):
                ctx, tgt = batch

                val_grad_fn = nx.value_and_grad(train_loss_fn, has_aux=True)
                (loss, last_loss), grad = val_grad_fn(to_bf16(state["params"]), ctx, tgt)

                new_grad = tree_map(lambda a, b: a + b, old_grad, grad)
                gnorm = global_norm(grad)
                return new_grad, (loss, last_loss, gnorm)

            if ctx.shape[0] == 1:
                val_grad_fn = nx.value_and_grad(train_loss_fn, has_aux=True)
                (loss, last_loss), grad = val_grad_fn(to_bf16(state["params"]), ctx[0], tgt[0])
                gnorm = global_norm(grad)
            else:
                # jax.lax.scan(microbatch, zeros_like(params), (ctx, tgt)) as a Python loop
                grad = tree_map(lambda x: torch.zeros_like(x), to_bf16(state["params"]))
                outs = []
                for i in range(ctx.shape[0]):
                    grad, out = microbatch(grad, (ctx[i], tgt[i]))
                    outs.append(out)
                loss, last_loss, gnorm = (torch.stack(o) for o in zip(*outs))

            grad_norm_micro = lax.pmean(gnorm, "batch")

            grad = lax.pmean(grad, "batch")
            grad_norm = global_norm(grad)
            updates, new_opt_state = optimizer.update(grad, state["opt_state"], state["params"])

            return to_f32(loss), to_f32(last_loss), to_f32(grad_norm), to_f32(grad_norm_micro), {
                "params": optim.apply_updates(state["params"], to_f32(updates)),
                "step": state["step"] + 1,
                "opt_state": new_opt_state
            }

        def grads(state, ctx, tgt):
            # Not in GPT-J: the first half of `train` (one microbatch), returning the
            # gradient tree itself, for the oracle test against JAX.
            val_grad_fn = nx.value_and_grad(train_loss_fn, has_aux=True)
            (loss, last_loss), grad = val_grad_fn(to_bf16(state["params"]), ctx[0], tgt[0])
            return to_f32(loss), to_f32(last_loss), lax.pmean(grad, "batch")

        def init(key, x):
            params = CausalTransformerShard(config).init(key)  # hk.transform(...).init(key, x, x)

            return {
                "params": ("early_cast" in config and to_bf16 or to_f32)(params),
                # np.array(0) in the original: named_axes refuses a numpy output that
                # out_axes places 'shard' on (issue 16, item 4); a torch scalar is fine
                "step": torch.tensor(0),
                "opt_state": optimizer.init(params)
            }

        def generate(state, key, ctx, ctx_length, aux, sampler_options):
            sampler = config["sampler"]
            gen_length = self.gen_length

            def generate_sample(params, key, context, ctx_length, aux):
                transformer = CausalTransformerShard(config)
                _, (last, states) = transformer.generate_initial(params, context, ctx_length)
                initial_state = (last, states, key)

                def generate_scan_fn(carry, sampler_input):
                    next_token, decode_state, sample_key = carry
                    sample_key, new_key = prng.split(sample_key)

                    logits, new_state = transformer.generate_once(params, next_token, decode_state)
                    next_token, sample_info = sampler(sample_key, logits, sampler_input, **sampler_options)
                    # None is an empty pytree to JAX; named_axes refuses a None output that
                    # out_axes places 'batch' on (issue 16, item 4): () is empty for both
                    sample_info = () if sample_info is None else sample_info

                    if self.return_logits:
                        output = (next_token, sample_info, logits)
                    else:
                        output = (next_token, sample_info)
                    new_carry = (next_token, new_state, new_key)
                    return new_carry, output

                # jax.lax.scan(generate_scan_fn, initial_state, xs=aux, length=gen_length)
                carry, outputs = initial_state, []
                for i in range(gen_length):
                    carry, output = generate_scan_fn(carry, aux[i])
                    outputs.append(output)
                outputs = tree_map(lambda *xs: torch.stack(xs), *outputs)
                final_token, _, final_key = carry
                return (final_token, final_key), outputs  # decode state left out: see docstring

            return generate_sample(state["params"], key, ctx, ctx_length, aux)

        # JAX's xmap compiles; named_axes' xmap runs eagerly unless wrapped in nx.jit
        def xmap(fun, **kw):
            f = nx.xmap(fun, **kw)
            return nx.jit(f, donate_argnums=kw.get("donate_argnums", ())) if jit else f
        self.axis_resources = axis_resources

        self.init_xmap = xmap(fun=init,
                              in_axes=(["shard", ...],
                                       ["batch", ...]),
                              out_axes=["shard", ...],
                              axis_resources=axis_resources)

        self.eval_xmap = xmap(fun=eval,
                              in_axes=(["shard", ...],
                                       ["batch", ...],
                                       ["batch", ...],
                                       ["batch", ...]),
                              out_axes=["batch", ...],
                              axis_resources=axis_resources)

        self.train_xmap = xmap(fun=train,
                               in_axes=(["shard", ...],
                                        ["batch", ...],
                                        ["batch", ...]),
                               out_axes=(["batch", ...], ["batch", ...], ["batch", ...], ["batch", ...], ["shard", ...]),
                               donate_argnums=(0,),
                               axis_resources=axis_resources)

        self.generate_xmap = xmap(fun=generate,
                                  in_axes=(["shard", ...],
                                           ["batch", ...],
                                           ["batch", ...],
                                           ["batch", ...],
                                           ["batch", ...],
                                           ["batch", ...]),
                                  out_axes=["batch", ...],
                                  axis_resources=axis_resources)

        self.move_xmap = xmap(fun=lambda x, _: to_bf16(x),
                              in_axes=(["shard", ...], ["batch", ...]),
                              out_axes=["shard", ...],
                              axis_resources=axis_resources)

        # not in GPT-J: `grads` above, with train_xmap's in_axes
        self.grad_xmap = xmap(fun=grads,
                              in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                              out_axes=(["batch", ...], ["batch", ...], ["shard", ...]),
                              axis_resources=axis_resources)

        self.gen_length = 1
        self.return_logits = False
        if init:
            self.init_state()

    def init_state(self, seed=42):
        # GPT-J: key = hk.PRNGSequence(42); one key per shard, one example per dp replica
        config = self.config
        shards = config["cores_per_replica"]
        seq = config["seq"]
        vocab = config["n_vocab"]

        key = prng.PRNGKey(seed)
        # (max(dp // jax.host_count(), 1), seq) in the original; any batch size works (the
        # example only gives shapes) as long as resources divide it: SerialLoop(2) on
        # `batch` needs 2, so take the per-replica batch
        example_shape = (config["per_replica_batch"], seq,)
        x = (prng.uniform(key, example_shape) * vocab).to(torch.int64)  # batch, len

        head_print("key shape", prng.split(key, shards).shape)
        head_print("in shape", x.shape)

        self.state = self.init_xmap(prng.split(key, shards), x)

        param_count = sum(p.numel() for p in tree_leaves(self.state["params"]))
        head_print(f"Total parameters: {param_count}")

    def train(self, sample):
        obs = torch.permute(sample["obs"], (1, 0, 2))
        target = torch.permute(sample["target"], (1, 0, 2))

        loss, last_loss, grad_norm, grad_norm_micro, self.state = self.train_xmap(self.state, obs, target)
        return loss.mean(), last_loss.mean(), grad_norm.mean(), grad_norm_micro.mean()

    def eval(self, sample):
        if "ctx_length" in sample:
            ctx_length = sample["ctx_length"]
        else:
            ctx_length = torch.tensor([len(sample["obs"][0])] * len(sample["obs"]))

        return self.eval_xmap(self.state, sample["obs"], sample["target"], ctx_length)

    def generate(self, ctx, ctx_length, gen_length, sampler_options, return_logits=False, seed=0):
        key = prng.PRNGKey(seed)  # GPT-J: hk.PRNGSequence(random.randint(0, 2 ** 60))

        batch_size = ctx.shape[0]
        aux = torch.zeros((batch_size, gen_length), dtype=torch.int64)
        self.gen_length = gen_length
        self.return_logits = return_logits

        return self.generate_xmap(self.state,
                                  prng.split(key, batch_size),
                                  ctx,
                                  torch.as_tensor(np.array(ctx_length), dtype=torch.int64),
                                  aux,
                                  sampler_options)
