"""A tiny GPT-J configuration (the keys of ``configs/6B_roto_256.json``) and the corpus.

GPT-J-6B: 28 layers, d_model 4096, 16 heads, vocab 50400, rotary on 64 of 256 dims per
head, seq 2048, 8 shards.  Here: 2 layers, d_model 32, 4 heads (8 dims, rotary on 4),
a character vocabulary of ``examples/data/sonnets.txt`` padded to 64, seq 16, 2 shards.
"""
from __future__ import annotations

from pathlib import Path

import torch

CORPUS = Path(__file__).resolve().parent.parent / "data" / "sonnets.txt"


def tiny_config(**overrides):
    config = {
        "layers": 2,
        "d_model": 32,
        "n_heads": 4,
        "n_vocab": 64,
        "norm": "layernorm",
        "pe": "rotary",
        "pe_rotary_dims": 4,

        "seq": 16,
        "cores_per_replica": 2,
        "per_replica_batch": 4,
        "gradient_accumulation_steps": 1,

        "warmup_steps": 5,
        "anneal_steps": 100,
        "lr": 1e-2,
        "end_lr": 1e-3,
        "weight_decay": 0.1,
    }
    config.update(overrides)
    return config


class CharCorpus:
    """The corpus as character ids (the vocabulary: its sorted characters, padded)."""

    def __init__(self, path=CORPUS, n_vocab=64):
        self.text = Path(path).read_text()
        self.chars = sorted(set(self.text))
        assert len(self.chars) <= n_vocab
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.ids = torch.tensor([self.index[c] for c in self.text], dtype=torch.int64)

    def encode(self, s):
        return torch.tensor([self.index[c] for c in s], dtype=torch.int64)

    def decode(self, ids):
        return "".join(self.chars[i] if i < len(self.chars) else "?" for i in ids.tolist())

    def batch(self, step, gas, batch, seq, seed=0):
        """``{"obs", "target"}`` of shape ``[gas, batch, seq]`` (GPT-J's TFRecord loader's
        layout), windows at positions drawn from ``step`` and ``seed``."""
        g = torch.Generator().manual_seed(seed * 100003 + step)
        starts = torch.randint(0, len(self.ids) - seq - 1, (gas, batch), generator=g)
        windows = torch.stack([torch.stack([self.ids[s:s + seq + 1] for s in row]) for row in starts])
        return {"obs": windows[..., :-1], "target": windows[..., 1:]}
