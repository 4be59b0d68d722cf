"""Port of the xmap layers of ``mesh_transformer/layers.py`` (GPT-J @ f8315e3).

``ReplicatedLayerNorm``, ``EmbeddingShard``, ``TransformerLayerShard`` and
``ProjectionShard``, written per instance of the named axes ``shard`` (the model-parallel
axis: each shard holds ``1/shards`` of the heads, of the FF width and of the vocabulary)
and ``batch``, with the same collectives: ``axis_index`` for each shard's slice of the
vocabulary, ``f_psum``/``g_psum`` around every layer, ``all_gather`` of the norm
parameters and of the output logits, ``pmax`` + ``psum`` for the sharded-vocab softmax
cross-entropy.

Differences from the original, each commented where it happens:
- parameters are passed explicitly (``params``, haiku's flat dict, see ``hk.py``), so
  every ``__call__`` takes ``params`` first, and ``Linear`` gets its input size;
- rotary tables (numpy float64 in the original, where jnp keeps float32) are cast to the
  activations' dtype (torch would promote to float64);
- ``a += b`` on jnp arrays rebinds ``a`` (they are immutable); the port writes
  ``a = a + b`` (an in-place add could not give ``a`` the named axes ``b`` carries);
- only the configurations GPT-J-6B uses are ported: ``norm="layernorm"`` and
  ``pe="rotary"`` (plus ``pe="fixed"``); the V2 layers (pjit code) are not.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import named_axes as nx
from named_axes import lax

from .hk import Linear, Module, TruncatedNormal, unique_names
from .util import f_psum, g_psum


class ReplicatedLayerNorm(Module):
    def __init__(self, dim, offset=True, name="replicated_layer_norm", parent=None):
        super().__init__(name, parent)
        self.dim = dim
        self.offset = offset

    def init(self, key):
        # hk.get_parameter("scale", param_shape, init=jnp.ones) / ("offset", init=jnp.zeros)
        return {self.name: {"scale": torch.ones(self.dim), "offset": torch.zeros(self.dim)}}

    def __call__(self, params, inputs):
        mean = torch.mean(inputs, dim=-1, keepdim=True)
        variance = torch.var(inputs, dim=-1, keepdim=True, unbiased=False)  # jnp.var

        scale = params[self.name]["scale"]
        scale = lax.all_gather(scale, "shard")[0]

        offset = params[self.name]["offset"]
        offset = lax.all_gather(offset, "shard")[0]

        scale = torch.broadcast_to(scale, inputs.shape)
        offset = torch.broadcast_to(offset, inputs.shape)
        mean = torch.broadcast_to(mean, inputs.shape)

        inv = scale * torch.rsqrt(variance + 1e-5)
        if self.offset:
            return inv * (inputs - mean) + offset
        else:
            return inv * (inputs - mean)


def getnorm(type, dim, parent):
    if type == "layernorm":
        return ReplicatedLayerNorm(dim, parent=parent)
    elif type == "layernorm-nobias":
        return ReplicatedLayerNorm(dim, offset=False, parent=parent)
    else:
        # layernorm-desync, rmsnorm, scalenorm, ...: not ported (GPT-J-6B uses layernorm)
        raise Exception("Not implemented")


def fixed_pos_embedding(x, seq_dim=0):
    dim = x.shape[-1]
    inv_freq = 1. / (10000 ** (np.arange(0, dim, 2) / dim))

    sinusoid_inp = np.einsum('i , j -> i j', np.arange(x.shape[seq_dim]), inv_freq)

    return np.sin(sinusoid_inp), np.cos(sinusoid_inp)


def rotate_every_two(x):
    x1 = x[:, :, ::2]
    x2 = x[:, :, 1::2]

    # a list, not a tuple: torch.compile's dynamo (torch 2.13) does not look inside a tuple
    # argument for values with __torch_function__ (NamedTensors), a list it does
    x = torch.stack([-x2, x1], dim=-1)

    return x.flatten(-2)  # rearrange(x, '... d j -> ... (d j)')


def apply_rotary_pos_emb(x, sincos):
    # repeat(t, 'b n -> b (n j)', j=2)[-x.shape[0]:, None, :]; as x's dtype (see docstring)
    sin, cos = map(lambda t: torch.as_tensor(np.repeat(t, 2, axis=1), dtype=x.dtype)
                   [-x.shape[0]:, None, :], sincos)
    return (x * cos) + (rotate_every_two(x) * sin)


class EmbeddingShard(Module):
    def __init__(self, config, name="embedding_shard", parent=None):
        super().__init__(name, parent)
        in_dim = config["n_vocab"]
        out_dim = config["d_model"]
        shards = config["cores_per_replica"]

        assert in_dim % shards == 0

        self.in_dim = in_dim
        self.out_dim = out_dim
        self.in_dim_per_shard = in_dim // shards
        self.out_dim_per_shard = out_dim // shards
        self.seq = config["seq"]

        self.has_pos_embs = config["pe"] == "fixed"
        self.embed_init = TruncatedNormal(stddev=0.02)

        self.proj = Linear(self.out_dim, self.in_dim_per_shard,
                           w_init=TruncatedNormal(stddev=1 / np.sqrt(in_dim)), parent=self)

    def init(self, key):
        params = self.proj.init(key)
        if self.has_pos_embs:
            params[self.name] = {"pos_embs": self.embed_init(
                self.param_key(key, "pos_embs"), (self.seq, self.out_dim_per_shard))}
        return params

    def __call__(self, params, x, dtype=torch.bfloat16):
        shard_start_index = lax.axis_index('shard') * self.in_dim_per_shard

        # jax.nn.one_hot is float and all-zero for labels outside [0, n): so is nx.one_hot
        input_onehot = nx.one_hot(x - shard_start_index, self.in_dim_per_shard,
                                  dtype=params[self.proj.name]["w"].dtype)
        proj_out = self.proj(params, input_onehot)

        proj_out = g_psum(proj_out)

        if self.has_pos_embs:
            all_pos_embed = lax.all_gather(params[self.name]["pos_embs"], 'shard')

            all_pos_embed = torch.transpose(all_pos_embed, 0, 1).flatten(1)  # hk.Flatten()

            proj_out = proj_out + all_pos_embed

        return proj_out


# We actually combine the FF and dense in one layer (i.e. compute in parallel) to minimize all reduces
class TransformerLayerShard(Module):
    def __init__(self, config, name=None, init_scale=1., parent=None):
        super().__init__(name, parent)
        heads = config["n_heads"]
        dim = config["d_model"]
        shards = config["cores_per_replica"]
        self.norm = getnorm(config["norm"], dim, parent=self)
        self.is_rotary = config["pe"] == "rotary"

        assert dim % heads == 0
        assert heads % shards == 0

        self.dim = dim
        self.dim_per_head = dim // heads
        self.heads_per_shard = heads // shards
        self.dim_per_shard = dim // shards
        self.pe_rotary_dims = config.get("pe_rotary_dims", self.dim_per_head)

        n = unique_names("linear", 6)  # haiku names the six hk.Linear in creation order
        self.q = Linear(self.dim_per_shard, dim, with_bias=False, name=n[0], parent=self)
        self.v = Linear(self.dim_per_shard, dim, with_bias=False, name=n[1], parent=self)
        self.k = Linear(self.dim_per_shard, dim, with_bias=False, name=n[2], parent=self)

        self.o = Linear(self.dim, self.dim_per_shard, with_bias=False, name=n[3], parent=self,
                        w_init=TruncatedNormal(stddev=init_scale / np.sqrt(self.dim)))

        self.dense_proj = Linear(self.dim_per_shard * 4, dim, name=n[4], parent=self)
        self.dense_proj_o = Linear(self.dim, self.dim_per_shard * 4, name=n[5], parent=self,
                                   w_init=TruncatedNormal(stddev=init_scale / np.sqrt(self.dim)))

    def self_attn(self, params, q, v, k, attn_bias):
        if self.is_rotary:
            k_rot = k[:, :, :self.pe_rotary_dims]
            k_pass = k[:, :, self.pe_rotary_dims:]

            q_rot = q[:, :, :self.pe_rotary_dims]
            q_pass = q[:, :, self.pe_rotary_dims:]

            sincos = fixed_pos_embedding(k_rot)
            q_rot = apply_rotary_pos_emb(q_rot, sincos)
            k_rot = apply_rotary_pos_emb(k_rot, sincos)

            k = torch.cat([k_rot, k_pass], dim=-1)
            q = torch.cat([q_rot, q_pass], dim=-1)

        attention_logits = torch.einsum("thd,Thd->htT", q, k)

        sqrt_key_size = float(np.sqrt(self.dim_per_head))
        attention_logits = attention_logits / sqrt_key_size

        attention_logits = attention_logits + attn_bias

        attention_weights = torch.softmax(attention_logits, dim=-1)
        attention_vec = torch.einsum("htT,Thd->thd", attention_weights, v).reshape((-1, self.dim_per_shard))

        return self.o(params, attention_vec)

    def ff(self, params, x):
        dense_proj = self.dense_proj(params, x)
        dense_proj = F.gelu(dense_proj, approximate="tanh")  # jax.nn.gelu's default
        return self.dense_proj_o(params, dense_proj)

    def qvk_proj(self, params, x):
        shape = tuple(x.shape[:-1]) + (self.heads_per_shard, self.dim_per_head)
        q = self.q(params, x).reshape(shape)
        v = self.v(params, x).reshape(shape)
        k = self.k(params, x).reshape(shape)

        return q, v, k

    def __call__(self, params, x, attn_bias):
        x = f_psum(x)
        x = self.norm(params, x)

        q, v, k = self.qvk_proj(params, x)

        seq_len = x.shape[0]
        causal_mask = torch.tril(torch.ones((seq_len, seq_len), dtype=x.dtype))
        bias = -1e10 * (1. - causal_mask)
        bias = bias + attn_bias

        attn_out = self.self_attn(params, q, v, k, bias)
        dense_out = self.ff(params, x)

        return g_psum(attn_out + dense_out)

    # iterate the decoding process by a single token
    def decode_once(self, params, decode_state, x, attn_bias):
        x = f_psum(x)
        x = self.norm(params, x)

        assert x.shape[0] == 1

        q, v, k = self.qvk_proj(params, x)

        # add new kv to end
        v = torch.cat((decode_state["v"], v), dim=0)[1:]
        k = torch.cat((decode_state["k"], k), dim=0)[1:]

        tokens_decoded = decode_state["tokens_decoded"] + 1
        length = v.shape[0]

        masked_tokens = length - tokens_decoded

        attention_mask = torch.arange(0, length) < masked_tokens
        bias = (-1e10 * attention_mask)
        bias = bias + attn_bias

        attn_out = self.self_attn(params, q, v, k, bias)
        dense_out = self.ff(params, x)

        return g_psum(attn_out + dense_out), {
            "tokens_decoded": tokens_decoded,
            "k": k,
            "v": v
        }

    # take in right aligned context tokens and generate an initial state
    def get_init_decode_state(self, params, x, given_length, attn_bias):
        x = f_psum(x)
        x = self.norm(params, x)

        q, v, k = self.qvk_proj(params, x)

        full_length = x.shape[0]
        masked_tokens = full_length - given_length

        seq_len = x.shape[0]
        causal_mask = torch.tril(torch.ones((seq_len, seq_len), dtype=x.dtype))

        bias = -1e10 * (1. - causal_mask)  # regular AR masking
        bias = bias - 1e10 * (torch.arange(0, full_length) < masked_tokens)  # mask out zero tokens before context starts
        bias = bias + attn_bias  # finally add attn bias for rpe

        attn_out = self.self_attn(params, q, v, k, bias)
        dense_out = self.ff(params, x)

        # given_length.astype(jnp.uint32): torch has no uint32 arithmetic; int64
        return g_psum(attn_out + dense_out), {"k": k, "v": v, "tokens_decoded": given_length.to(torch.int64)}


class ProjectionShard(Module):
    def __init__(self, config, name="projection_shard", parent=None):
        super().__init__(name, parent)
        out_dim = config["n_vocab"]
        shards = config["cores_per_replica"]
        self.norm = getnorm(config["norm"], config["d_model"], parent=self)

        assert out_dim % shards == 0

        self.dim = out_dim
        self.dim_per_shard = out_dim // shards

        self.proj = Linear(self.dim_per_shard, config["d_model"], parent=self)

    def __call__(self, params, x):
        x = self.norm(params, x)
        proj = self.proj(params, x)

        all_proj = lax.all_gather(proj, 'shard')

        return torch.transpose(all_proj, 0, 1).flatten(1)  # hk.Flatten()

    def loss(self, params, x, targets, z_loss=1):
        x = f_psum(x)
        x = self.norm(params, x)
        logits = self.proj(params, x)

        shard_start_index = lax.axis_index('shard') * self.dim_per_shard
        global_max = lax.pmax(logits.max(-1, keepdim=True).values.detach(), "shard")  # stop_gradient
        logits = logits - global_max.detach()  # `logits -=`

        gt_onehot = nx.one_hot(targets - shard_start_index, self.dim_per_shard, dtype=logits.dtype)
        predicted_logits = torch.sum(torch.multiply(gt_onehot, logits), dim=-1)
        predicted_logits = g_psum(predicted_logits)

        exp_logits = torch.exp(logits)

        sum_exp_logits = exp_logits.sum(dim=-1)
        sum_exp_logits = g_psum(sum_exp_logits)

        loss = torch.log(sum_exp_logits) - predicted_logits

        loss = loss + (1e-4 * torch.square(torch.log(sum_exp_logits)) * z_loss).mean()

        correct = (0.0 == predicted_logits)

        return loss, correct
