"""A tiny character-level transformer whose attention is written with named axes.

Inside the model a token's vector has one positional axis (``embed``) and named axes
``batch`` and ``seq``; attention weights add ``heads``.  No axis numbers, no reshapes,
no transposes: keys of all positions are gathered with ``lax.all_gather(k, 'seq')``,
the causal mask compares positions with ``lax.axis_index('seq')``, and the heads are
summed with ``lax.psum(..., 'heads')``.  Trained for a short while on
``examples/data/sonnets.txt``, then sampled.

    python examples/transformer.py [--steps 200]
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

import named_axes as nx
from named_axes import lax

CORPUS = Path(__file__).resolve().parent / "data" / "sonnets.txt"


# -- the model: one token's view, with names -------------------------------------------
def attention(x, wq, wk, wv, wo):
    """x: (embed,) {batch, seq};  wq/wk/wv: (embed, head_dim) {heads};  wo: (head_dim, embed) {heads}."""
    q, k, v = x @ wq, x @ wk, x @ wv                       # (head_dim,) {batch, seq, heads}
    keys = lax.all_gather(k, 'seq')                       # (seq_len, head_dim) {batch, heads}
    values = lax.all_gather(v, 'seq')
    scores = keys @ q / math.sqrt(q.shape[-1])            # (seq_len,) {batch, seq, heads}
    future = torch.arange(scores.shape[-1]) > lax.axis_index('seq')   # (seq_len,) {seq}
    weights = torch.softmax(scores.masked_fill(future, float('-inf')), -1)
    return lax.psum(weights @ values @ wo, 'heads')       # (embed,) {batch, seq}


def block(x, p):
    x = x + attention(F.layer_norm(x, x.shape), p['wq'], p['wk'], p['wv'], p['wo'])
    h = F.layer_norm(x, x.shape)
    return x + torch.relu(h @ p['up']) @ p['down']


def logits_of(params, tokens):
    """tokens: () {batch, seq}  ->  logits: (vocab,) {batch, seq}."""
    x = F.embedding(tokens, params['embed']) + F.embedding(lax.axis_index('seq'), params['pos'])
    for p in params['blocks']:
        x = block(x, p)
    return F.layer_norm(x, x.shape) @ params['out']


def named_loss(params, tokens, targets):
    return lax.pmean(F.cross_entropy(logits_of(params, tokens), targets), ('batch', 'seq'))


def param_axes(params):
    """in_axes for the parameters: the attention weights carry `heads` first."""
    heads = ['heads', ...]
    blocks = [{k: (heads if k in ('wq', 'wk', 'wv', 'wo') else [...]) for k in p}
              for p in params['blocks']]
    return {'embed': [...], 'pos': [...], 'blocks': blocks, 'out': [...]}


def init(vocab, *, embed=32, heads=4, layers=1, context=32, gen):
    def w(*shape, fan_in):
        return (torch.randn(*shape, generator=gen) / math.sqrt(fan_in)).requires_grad_()
    hd = embed // heads
    blocks = [{'wq': w(heads, embed, hd, fan_in=embed), 'wk': w(heads, embed, hd, fan_in=embed),
               'wv': w(heads, embed, hd, fan_in=embed), 'wo': w(heads, hd, embed, fan_in=embed),
               'up': w(embed, 4 * embed, fan_in=embed), 'down': w(4 * embed, embed, fan_in=4 * embed)}
              for _ in range(layers)]
    return {'embed': w(vocab, embed, fan_in=1), 'pos': w(context, embed, fan_in=1),
            'blocks': blocks, 'out': w(embed, vocab, fan_in=embed)}


# -- the same attention, positionally, to check the named one against -------------------
def positional_attention(x, wq, wk, wv, wo):              # x: (batch, seq, embed)
    q, k, v = (torch.einsum('bse,hed->bhsd', x, w) for w in (wq, wk, wv))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    out = torch.softmax(scores.masked_fill(~causal, float('-inf')), -1) @ v
    return torch.einsum('bhsd,hde->bse', out, wo)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=int(os.environ.get("NX_EXAMPLE_STEPS", 200)))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    text = CORPUS.read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    params = init(len(chars), context=args.context, gen=gen)
    print(f"corpus: {len(text)} characters, vocabulary {len(chars)}; "
          f"{sum(p.numel() for p in _leaves(params))} parameters")

    # check: the named attention equals the usual positional one
    x = torch.randn(2, 5, 32, generator=gen)
    b = params['blocks'][0]
    named_attn = nx.xmap(attention, in_axes=(['batch', 'seq', ...], ['heads', ...], ['heads', ...],
                                             ['heads', ...], ['heads', ...]),
                         out_axes=['batch', 'seq', ...])
    with torch.no_grad():
        same = torch.allclose(named_attn(x, b['wq'], b['wk'], b['wv'], b['wo']),
                              positional_attention(x, b['wq'], b['wk'], b['wv'], b['wo']), atol=1e-5)
    print(f"named attention matches positional attention: {same}")

    axes = (param_axes(params), ['batch', 'seq', ...], ['batch', 'seq', ...])
    loss = nx.xmap(named_loss, in_axes=axes, out_axes=[...])
    opt = torch.optim.Adam(_leaves(params), lr=3e-3)
    history, start = [], time.perf_counter()
    bar = tqdm(range(args.steps), desc="training", unit="step", mininterval=0.5)
    for step in bar:
        i = torch.randint(0, len(data) - args.context - 1, (args.batch, 1), generator=gen)
        window = data[i + torch.arange(args.context + 1)]
        value = loss(params, window[:, :-1], window[:, 1:])
        opt.zero_grad()
        value.backward()
        opt.step()
        history.append(value.item())
        if step % max(1, args.steps // 6) == 0 or step == args.steps - 1:
            tqdm.write(f"step {step:4d}  loss {value.item():.3f}")
    bar.close()
    print(f"loss {history[0]:.3f} -> {sum(history[-10:]) / len(history[-10:]):.3f} "
          f"(mean of the last 10 steps) in {args.steps} steps, {time.perf_counter() - start:.1f} s")

    sample = generate(params, "Shall I ", 160, stoi, chars, args.context, gen)
    print("sample:\n" + sample)
    return {"history": history, "sample": sample}


def generate(params, prompt, n, stoi, chars, context, gen, temperature=0.7):
    """Sample ``n`` characters after ``prompt`` (one sequence: the batch axis has size 1)."""
    step = nx.xmap(logits_of, in_axes=(param_axes(params), ['batch', 'seq', ...]),
                   out_axes=['batch', 'seq', ...])
    ids = [stoi[c] for c in prompt]
    with torch.no_grad():
        for _ in range(n):
            logits = step(params, torch.tensor([ids[-context:]]))[0, -1]
            ids.append(torch.multinomial(torch.softmax(logits / temperature, -1), 1,
                                         generator=gen).item())
    return "".join(chars[i] for i in ids)


def _leaves(params):
    out = [params['embed'], params['pos'], params['out']]
    for p in params['blocks']:
        out.extend(p.values())
    return out


if __name__ == "__main__":
    main()
