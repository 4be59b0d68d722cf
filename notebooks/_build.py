"""Write the notebooks from the cell lists below, then execute them in place (with outputs).

    .venv/bin/python notebooks/_build.py [name ...]

Edit the cells here, not in the .ipynb files, and re-run to refresh the committed outputs.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}


def md(text):
    return ("markdown", text.strip("\n"))


def code(text):
    return ("code", text.strip("\n"))


# ---------------------------------------------------------------------------------------
NOTEBOOKS["xmap_tutorial"] = [
    md("""
# Named axes and easy-to-revise parallelism, in PyTorch

This is the JAX `xmap` tutorial retold for PyTorch with `named_axes`. You write a
function with **named axes** (`batch`, `hidden`, `classes`) instead of axis numbers;
`nx.xmap` decides which axes of your positional tensors become named; and a separate
argument, `axis_resources`, decides where each named axis is computed — vectorized
here, split over devices, or in serial chunks — without touching the function.
"""),
    md("## A toy network: positions vs names\n\nThe usual positional version:"),
    code("""
import torch
import torch.nn.functional as F
import named_axes as nx
from named_axes import lax

torch.manual_seed(0)

def predict(w1, w2, images):
    hiddens = torch.relu(images @ w1)
    logits = hiddens @ w2
    return logits - logits.logsumexp(1, keepdim=True)

def loss(w1, w2, images, labels):
    predictions = predict(w1, w2, images)
    targets = F.one_hot(labels, predictions.shape[-1])
    return -(targets * predictions).sum(1).mean(0)

w1, w2 = torch.randn(784, 512) * 0.05, torch.randn(512, 10) * 0.05
images, labels = torch.randn(128, 784), torch.randint(0, 10, (128,))
loss(w1, w2, images, labels)
"""),
    md("""
The same network with names. `pdot` contracts a named axis, `psum`/`pmean` reduce over
one, and nothing depends on where an axis sits:
"""),
    code("""
def named_predict(w1, w2, image):
    hidden = torch.relu(lax.pdot(image, w1, 'inputs'))
    logits = lax.pdot(hidden, w2, 'hidden')
    return logits - nx.logsumexp(logits, 'classes')

def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = lax.psum(1, 'classes')
    targets = nx.one_hot(labels, num_classes, dim='classes')
    losses = lax.psum(targets * predictions, 'classes')
    return -lax.pmean(losses, 'batch')

in_axes = [['inputs', 'hidden', ...],
           ['hidden', 'classes', ...],
           ['batch', 'inputs', ...],
           ['batch', ...]]
xloss = nx.xmap(named_loss, in_axes=in_axes, out_axes=[...])
xloss(w1, w2, images, labels)
"""),
    md("""
Same number. Unlike JAX's xmap, this one can also be differentiated (JAX had no
derivative for a `logsumexp` over a named axis) and compiled without a mesh:
"""),
    code("""
g1, g2 = nx.grad(xloss, argnums=(0, 1))(w1, w2, images, labels)
r1, r2 = torch.func.grad(loss, argnums=(0, 1))(w1, w2, images, labels)
print(torch.allclose(g1, r1, atol=1e-6), torch.allclose(g2, r2, atol=1e-6))
compiled = torch.compile(xloss, fullgraph=True)
print(torch.allclose(compiled(w1, w2, images, labels), loss(w1, w2, images, labels), atol=1e-5))
"""),
    md("""
### Training it

A few hundred SGD steps on a synthetic task (ten Gaussian blobs), gradients from
`nx.value_and_grad` of the xmapped loss:
"""),
    code("""
import matplotlib.pyplot as plt

gen = torch.Generator().manual_seed(0)
centres = torch.randn(10, 784, generator=gen) * 0.08
def batch(n):
    y = torch.randint(0, 10, (n,), generator=gen)
    return centres[y] + torch.randn(n, 784, generator=gen), y

step = nx.value_and_grad(xloss, argnums=(0, 1))
v1, v2 = torch.randn(784, 64, generator=gen) / 28, torch.randn(64, 10, generator=gen) / 8
history = []
for i in range(200):
    value, (d1, d2) = step(v1, v2, *batch(128))
    v1, v2 = v1 - 0.1 * d1, v2 - 0.1 * d2
    history.append(value.item())

xpredict = nx.xmap(named_predict, in_axes=in_axes[:3], out_axes=['batch', 'classes', ...])
test_x, test_y = batch(2000)
accuracy = (xpredict(v1, v2, test_x).argmax(-1) == test_y).float().mean().item()
plt.figure(figsize=(5, 2.5)); plt.plot(history); plt.xlabel('step'); plt.ylabel('loss')
plt.title(f'named MLP, test accuracy {accuracy:.0%}'); plt.tight_layout(); plt.show()
"""),
    md("""
## Named tensors

Inside a named program a value has a positional `shape` and an order-free
`named_shape`. JAX left `named_shape` as a TODO in its tutorial; here it works:
"""),
    code("""
def my_func(x):
    assert x.shape == (5,)
    assert x.named_shape == {'batch': 20}
    return x

x = torch.randn(20, 5)
f = nx.xmap(my_func, in_axes={0: 'batch'}, out_axes={1: 'batch'})
y = f(x)
print(y.shape, torch.equal(y, x.T))
"""),
    md("Outside `xmap`, `nx.named` builds one directly; in a notebook it renders as a table:"),
    code("""
e = nx.named(torch.randn(20, 30, 5, 7), {0: 'batch', 1: 'sequence'})
print(e.shape, e.named_shape, e.ndim)
e
"""),
    md("A name used twice must have one size — and the error says which and where:"),
    code("""
try:
    nx.xmap(lambda x, y: x * y, in_axes=(['i', ...], ['i', ...]), out_axes=['i', ...])(
        torch.arange(5), torch.arange(7))
except ValueError as err:
    print(type(err).__name__, '->', err)
"""),
    md("""
## How named axes propagate

**Named axes never touch positional ones.** Any function written without names runs
once per named index, as if under `vmap` — here `torch.linalg.matrix_exp` on every pair:
"""),
    code("""
A, E = torch.randn(7, 3, 3), torch.randn(5, 3, 3)
f = lambda a, e: torch.linalg.matrix_exp(a) @ e
all_pairs = nx.xmap(f, in_axes=(['ba', ...], ['be', ...]), out_axes=['ba', 'be', ...])(A, E)
print(all_pairs.shape, torch.allclose(all_pairs[3, 2], f(A[3], E[2]), atol=1e-5))
"""),
    md("**Broadcasting is by name**: the named shape of a result is the union of the inputs'."),
    code("""
def named_broadcasting(x, y, z):
    i = x + y;  print('i', tuple(i.shape), i.named_shape)
    j = y + z;  print('j', tuple(j.shape), j.named_shape)
    return i + j

k = nx.xmap(named_broadcasting, in_axes=(['a', ...], ['b', ...], ['c', ...]),
            out_axes=['a', 'b', 'c', ...])(torch.ones(2, 2, 1, 1), torch.ones(3, 1, 3, 1),
                                           torch.ones(5, 1, 1, 5))
k.shape
"""),
    md("""
**Reductions** take names wherever a `dim` goes — mixed with positions, all at once or
one by one. (JAX supported this for `sum`, `max`, `min`; here every reduction and
`softmax`-like function does.)
"""),
    code("""
def named_broadcast_and_reduce(x, y):
    z = x + y                                   # (5,) {'x': 2, 'y': 4}
    w = z.sum((0, 'x', 'y'))
    w0 = nx.sum(z, 0); w0x = nx.sum(w0, 'x'); w_steps = nx.sum(w0x, 'y')
    return w, w_steps, nx.softmax(z, 'y')

w, w_steps, s = nx.xmap(named_broadcast_and_reduce, in_axes=({0: 'x'}, {1: 'y'}),
                        out_axes=({}, {}, ['x', 'y', ...]))(torch.arange(2.), torch.arange(20.).reshape(5, 4))
w, w_steps, s.sum(1)
"""),
    md("""
### einsum with named axes

Letters are positional axes, braces hold named ones; named axes missing from the output
are contracted. The case JAX's tutorial left under `if False: # TODO` runs here, with
any number of operands:
"""),
    code("""
def named_batch_matrix_single_matrix(x, y):     # x: (5,) {b, k};  y: () {k, m}
    return nx.einsum('n{b,k},{k,m}->n{b,m}', x, y)

x, y = torch.randn(20, 5, 7), torch.randn(7, 11)
zx = nx.xmap(named_batch_matrix_single_matrix, in_axes=[{0: 'b', 2: 'k'}, ['k', 'm', ...]],
             out_axes={0: 'b', 2: 'm'})(x, y)      # (JAX's version placed 'n', a positional axis)
print(zx.shape, torch.allclose(zx, torch.einsum('bnk,km->bnm', x, y), atol=1e-5))
"""),
    md("### Collectives\n\nEvery `pmap` collective works on named axes:"),
    code("""
x = torch.arange(8)
print(nx.xmap(lambda x: lax.pshuffle(x, 'i', list(reversed(range(8)))),
              in_axes=['i', ...], out_axes=['i', ...])(x))
print(nx.xmap(lambda x: (lax.psum(x, 'i'), lax.pmax(x, 'i'), lax.axis_index('i') * 10),
              in_axes=['i', ...], out_axes=([...], [...], ['i', ...]))(x))
print(nx.xmap(lambda x: lax.all_gather(x, 'i'), in_axes=['i', ...], out_axes=[...])(x))
"""),
    md("""
## Parallelism

By default `xmap` vectorizes on one device. `axis_resources` maps named axes to the axes
of a device **mesh** (or to time, with `SerialLoop`); results never change, only where
and how they are computed. This notebook runs in one process, whose mesh has one CPU
device; the same code under `torchrun --nproc-per-node=4` splits the work over four
processes with DTensor (see `examples/data_parallel.py` and `docs/parallelism.md`).
"""),
    code("""
import numpy as np
from named_axes.parallel import Mesh, SerialLoop, local_devices

reference = xloss(w1, w2, images, labels)
devices = np.array(local_devices())
results = {}
for resources in ({'batch': 'x'}, {'hidden': 'x'}, {'batch': 'x', 'hidden': 'y'}):
    mesh = Mesh(devices.reshape((-1,) + (1,) * (len(set(resources.values())) - 1)),
                tuple(sorted(set(resources.values()))))
    with mesh:
        out = nx.xmap(named_loss, in_axes=in_axes, out_axes=[...], axis_resources=resources)(
            w1, w2, images, labels)
    results[str(resources)] = out.item()
for chunks in (2, 8):
    out = nx.xmap(named_loss, in_axes=in_axes, out_axes=[...],
                  axis_resources={'batch': SerialLoop(chunks)})(w1, w2, images, labels)
    results[f'batch in {chunks} serial chunks'] = out.item()
print('vectorized', reference.item())
for k, v in results.items():
    print(f'{k:35s} {v:.6f}  same: {abs(v - reference.item()) < 1e-5}')
"""),
    md("""
Resource mistakes are checked. Two named axes mapped to one mesh axis may not meet in
one value (JAX's tutorial said this was left unchecked):
"""),
    code("""
def sum_two_args(x, y):
    return nx.sum(x, 'a') + nx.sum(y, 'b')             # fine: 'a' and 'b' never meet

def product(x, y):
    return x * y                                       # 'a' and 'b' meet here

q, u = torch.ones(4), torch.ones(12)
with Mesh(devices, ('x',)):
    print(nx.xmap(sum_two_args, in_axes=(['a', ...], ['b', ...]), out_axes=[...],
                  axis_resources={'a': 'x', 'b': 'x'})(q, u))
    try:
        nx.xmap(product, in_axes=(['a', ...], ['b', ...]), out_axes=['a', 'b', ...],
                axis_resources={'a': 'x', 'b': 'x'})(q, u)
    except ValueError as err:
        print(type(err).__name__, '->', err)
try:
    nx.xmap(sum_two_args, in_axes=(['a', ...], ['b', ...]), out_axes=[...],
            axis_resources={'a': 'x'})(q, u)
except ValueError as err:
    print(type(err).__name__, '->', err)
"""),
    md("""
### Where does a value live?

A value is split over a mesh axis exactly when it carries a named axis mapped to it, and
replicated otherwise. The picture shows, for a 2×2 mesh with
`axis_resources={'batch': 'x', 'hidden': 'y'}`, which device holds which block of three
values of the network: the images (`{batch, inputs}`), the first weight
(`{inputs, hidden}`) and the hidden activations (`{batch, hidden}`).
"""),
    code("""
import matplotlib.patches as patches

mesh_shape, resources = {'x': 2, 'y': 2}, {'batch': 'x', 'hidden': 'y'}
values = {'images {batch, inputs}': ('batch', 'inputs', 128, 784),
          'w1 {inputs, hidden}': ('inputs', 'hidden', 784, 512),
          'hidden {batch, hidden}': ('batch', 'hidden', 128, 512)}
colors = plt.cm.tab10.colors
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
for ax, (title, (rows, cols, nr, nc)) in zip(axes, values.items()):
    r_split = mesh_shape[resources[rows]] if rows in resources else 1
    c_split = mesh_shape[resources[cols]] if cols in resources else 1
    for i in range(r_split):
        for j in range(c_split):
            owners = [(x, y) for x in range(2) for y in range(2)
                      if (r_split == 1 or (x, y)[list(mesh_shape).index(resources[rows])] == i)
                      and (c_split == 1 or (x, y)[list(mesh_shape).index(resources[cols])] == j)]
            ax.add_patch(patches.Rectangle((j / c_split, 1 - (i + 1) / r_split), 1 / c_split,
                         1 / r_split, color=colors[2 * owners[0][0] + owners[0][1]], alpha=0.6))
            ax.text((j + 0.5) / c_split, 1 - (i + 0.5) / r_split,
                    '\\n'.join(f'dev ({x},{y})' for x, y in owners), ha='center', va='center')
    ax.set_title(title); ax.set_xlabel(f'{cols} ({nc})'); ax.set_ylabel(f'{rows} ({nr})')
    ax.set_xticks([]); ax.set_yticks([])
plt.suptitle("mesh {'x': 2, 'y': 2}, axis_resources={'batch': 'x', 'hidden': 'y'}")
plt.tight_layout(); plt.show()
"""),
    md("""
`w1` carries `hidden` but not `batch`, so it is split over `y` and replicated over `x`:
devices (0, j) and (1, j) hold the same half. `images` is the other way round.

## Where to go next

- `per_example_grads.ipynb`: `grad` inside a named program, and `reduce_axes`.
- `transformer.ipynb`: attention written with `batch`, `seq` and `heads`, trained on sonnets.
- `docs/guide.md` for the whole API; `docs/parallelism.md` for multi-process runs.
"""),
]

# ---------------------------------------------------------------------------------------
NOTEBOOKS["per_example_grads"] = [
    md("""
# Per-example gradients with named axes

Inside `xmap` over `batch`, a loss written for **one** example is a scalar whose named
shape is `{'batch': n}`. `nx.grad` of it gives one gradient per example — the gradient
carries `batch` too. `reduce_axes=('batch',)` sums over `batch` instead (JAX's
`reduce_axes`). No loop, no `vmap` bookkeeping, no hand-written batch dimension.
"""),
    code("""
import torch, torch.nn.functional as F
import matplotlib.pyplot as plt
import named_axes as nx
from named_axes import lax

torch.manual_seed(0)

def example_loss(w, b, x, y):            # x: (features,) {batch};  y: () {batch}
    loss = F.cross_entropy(x @ w + b, y)
    print('loss of one example:', tuple(loss.shape), loss.named_shape)
    return loss

def grads(w, b, x, y):
    per_example = nx.grad(example_loss, argnums=(0, 1))(w, b, x, y)
    summed = nx.grad(example_loss, argnums=(0, 1), reduce_axes=('batch',))(w, b, x, y)
    print('per-example dw:', tuple(per_example[0].shape), per_example[0].named_shape)
    print('reduced dw:    ', tuple(summed[0].shape), summed[0].named_shape)
    return per_example, summed

w, b = torch.randn(20, 5), torch.zeros(5)
x, y = torch.randn(8, 20), torch.randint(0, 5, (8,))
(gw, gb), (sw, sb) = nx.xmap(grads, in_axes=([...], [...], ['batch', ...], ['batch', ...]),
                             out_axes=((['batch', ...], ['batch', ...]), ([...], [...])))(w, b, x, y)
gw.shape, sw.shape
"""),
    md("Check against a Python loop of `torch.autograd.grad`, one example at a time:"),
    code("""
loop = []
for i in range(8):
    wi = w.clone().requires_grad_()
    loop.append(torch.autograd.grad(F.cross_entropy(x[i] @ wi + b, y[i]), wi)[0])
print('per-example:', torch.allclose(gw, torch.stack(loop), atol=1e-6))
print('reduce_axes sums them:', torch.allclose(sw, gw.sum(0), atol=1e-5))
"""),
    md("""
## Clipping each example's gradient

The core step of differentially private SGD: clip every example's gradient to norm
`C`, average, add noise. With named axes the per-example norm is an ordinary
expression — it just carries `batch`:
"""),
    code("""
def clipped_mean_grads(w, b, x, y, clip):
    gw, gb = nx.grad(lambda w, b: F.cross_entropy(x @ w + b, y), argnums=(0, 1))(w, b)
    norm = torch.sqrt((gw ** 2).sum() + (gb ** 2).sum())          # () {batch}
    scale = torch.clamp(clip / norm, max=1.0)
    return lax.pmean(gw * scale, 'batch'), lax.pmean(gb * scale, 'batch'), norm

clipped = nx.xmap(clipped_mean_grads, in_axes=([...], [...], ['batch', ...], ['batch', ...], [...]),
                  out_axes=([...], [...], ['batch', ...]))
batch_loss = nx.xmap(lambda w, b, x, y: lax.pmean(F.cross_entropy(x @ w + b, y), 'batch'),
                     in_axes=([...], [...], ['batch', ...], ['batch', ...]), out_axes=[...])

gen = torch.Generator().manual_seed(0)
centres = torch.randn(5, 20, generator=gen)
ys = torch.randint(0, 5, (4096,), generator=gen)
xs = centres[ys] + 1.5 * torch.randn(4096, 20, generator=gen)
w, b, C, sigma = torch.zeros(20, 5), torch.zeros(5), 1.0, 0.5
losses, norms_seen = [], []
for step in range(150):
    idx = torch.randint(0, 4096, (64,), generator=gen)
    dw, db, norms = clipped(w, b, xs[idx], ys[idx], C)
    w = w - 0.5 * (dw + sigma * C / 64 * torch.randn(dw.shape, generator=gen))
    b = b - 0.5 * (db + sigma * C / 64 * torch.randn(db.shape, generator=gen))
    losses.append(batch_loss(w, b, xs[idx], ys[idx]).item())
    if step in (0, 149):
        norms_seen.append(norms)

fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3))
a1.plot(losses); a1.set_xlabel('step'); a1.set_ylabel('loss'); a1.set_title('clipped, noisy SGD')
a2.hist([n.log10().numpy() for n in norms_seen], bins=20, label=['step 0', 'step 149'])
a2.axvline(0, color='k', ls='--', label='clip C=1'); a2.set_xlabel('log10 per-example grad norm')
a2.legend(); plt.tight_layout(); plt.show()
print(f'accuracy {((xs @ w + b).argmax(-1) == ys).float().mean():.1%}')
"""),
]

# ---------------------------------------------------------------------------------------
NOTEBOOKS["transformer"] = [
    md("""
# A transformer with named axes

Attention is a thicket of axis bookkeeping: `(batch, heads, seq, head_dim)` reshapes,
transposes, and a mask that must broadcast just so. With named axes each line is written
for **one token of one sequence**, with `batch`, `seq` and `heads` as names:

- `lax.all_gather(k, 'seq')` collects the keys of every position into a positional axis;
- `lax.axis_index('seq')` is "my position", so the causal mask is a comparison;
- `lax.psum(..., 'heads')` merges the heads.
"""),
    code("""
import math, time
from pathlib import Path
import torch, torch.nn.functional as F
import matplotlib.pyplot as plt
import named_axes as nx
from named_axes import lax

torch.manual_seed(0)

def attention(x, wq, wk, wv, wo):
    # x: (embed,) {batch, seq};  wq/wk/wv: (embed, head_dim) {heads};  wo: (head_dim, embed) {heads}
    q, k, v = x @ wq, x @ wk, x @ wv                       # (head_dim,) {batch, seq, heads}
    keys, values = lax.all_gather(k, 'seq'), lax.all_gather(v, 'seq')   # (seq_len, head_dim) {batch, heads}
    scores = keys @ q / math.sqrt(q.shape[-1])            # (seq_len,) {batch, seq, heads}
    future = torch.arange(scores.shape[-1]) > lax.axis_index('seq')     # (seq_len,) {seq}
    weights = torch.softmax(scores.masked_fill(future, float('-inf')), -1)
    return lax.psum(weights @ values @ wo, 'heads')       # (embed,) {batch, seq}
"""),
    md("It agrees with the usual positional implementation:"),
    code("""
def positional_attention(x, wq, wk, wv, wo):              # x: (batch, seq, embed)
    q, k, v = (torch.einsum('bse,hed->bhsd', x, w) for w in (wq, wk, wv))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    out = torch.softmax(scores.masked_fill(~causal, float('-inf')), -1) @ v
    return torch.einsum('bhsd,hde->bse', out, wo)

x = torch.randn(2, 6, 32)
wq, wk, wv, wo = torch.randn(4, 32, 8), torch.randn(4, 32, 8), torch.randn(4, 32, 8), torch.randn(4, 8, 32)
heads = ['heads', ...]
named_attention = nx.xmap(attention, in_axes=(['batch', 'seq', ...], heads, heads, heads, heads),
                          out_axes=['batch', 'seq', ...])
torch.allclose(named_attention(x, wq, wk, wv, wo), positional_attention(x, wq, wk, wv, wo), atol=1e-4)
"""),
    md("## A tiny character model\n\nOne block, 32-wide, trained for a short while on eight of Shakespeare's sonnets (`examples/data/sonnets.txt`)."),
    code("""
def block(x, p):
    x = x + attention(F.layer_norm(x, x.shape), p['wq'], p['wk'], p['wv'], p['wo'])
    return x + torch.relu(F.layer_norm(x, x.shape) @ p['up']) @ p['down']

def logits_of(params, tokens):                            # tokens: () {batch, seq}
    x = F.embedding(tokens, params['embed']) + F.embedding(lax.axis_index('seq'), params['pos'])
    for p in params['blocks']:
        x = block(x, p)
    return F.layer_norm(x, x.shape) @ params['out']        # (vocab,) {batch, seq}

def named_loss(params, tokens, targets):
    return lax.pmean(F.cross_entropy(logits_of(params, tokens), targets), ('batch', 'seq'))

repo = Path(nx.__file__).resolve().parents[1]               # found from any working directory
text = (repo / 'examples' / 'data' / 'sonnets.txt').read_text()
chars = sorted(set(text)); stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
V, D, H, T = len(chars), 32, 4, 32

def w(*shape, fan_in):
    return (torch.randn(*shape) / math.sqrt(fan_in)).requires_grad_()
params = {'embed': w(V, D, fan_in=1), 'pos': w(T, D, fan_in=1), 'out': w(D, V, fan_in=D),
          'blocks': [{'wq': w(H, D, D // H, fan_in=D), 'wk': w(H, D, D // H, fan_in=D),
                      'wv': w(H, D, D // H, fan_in=D), 'wo': w(H, D // H, D, fan_in=D),
                      'up': w(D, 4 * D, fan_in=D), 'down': w(4 * D, D, fan_in=4 * D)}]}
param_axes = {'embed': [...], 'pos': [...], 'out': [...],
              'blocks': [{k: heads if k in ('wq', 'wk', 'wv', 'wo') else [...] for k in params['blocks'][0]}]}
loss = nx.xmap(named_loss, in_axes=(param_axes, ['batch', 'seq', ...], ['batch', 'seq', ...]), out_axes=[...])
leaves = [params['embed'], params['pos'], params['out'], *params['blocks'][0].values()]
print(f'{len(text)} characters, vocabulary {V}, {sum(p.numel() for p in leaves)} parameters')
"""),
    code("""
opt = torch.optim.Adam(leaves, lr=3e-3)
history, start = [], time.perf_counter()
for step in range(150):
    i = torch.randint(0, len(data) - T - 1, (8, 1))
    window = data[i + torch.arange(T + 1)]
    value = loss(params, window[:, :-1], window[:, 1:])
    opt.zero_grad(); value.backward(); opt.step()
    history.append(value.item())
print(f'{len(history)} steps in {time.perf_counter() - start:.0f} s; loss {history[0]:.2f} -> {history[-1]:.2f}')
plt.figure(figsize=(5, 2.5)); plt.plot(history); plt.xlabel('step'); plt.ylabel('loss (nats/char)')
plt.tight_layout(); plt.show()
"""),
    md("Sampling reuses `logits_of` with a batch of one; the sequence axis grows as we go:"),
    code("""
step_logits = nx.xmap(logits_of, in_axes=(param_axes, ['batch', 'seq', ...]), out_axes=['batch', 'seq', ...])
ids = [stoi[c] for c in 'Shall I ']
with torch.no_grad():
    for _ in range(150):
        logits = step_logits(params, torch.tensor([ids[-T:]]))[0, -1]
        ids.append(torch.multinomial(torch.softmax(logits / 0.7, -1), 1).item())
print(''.join(chars[i] for i in ids))
"""),
    md("After a minute of training it has learned letters, spaces and line breaks, not yet sonnets. `examples/transformer.py` trains the same model longer."),
    md("""
## The same kind of model, tensor- and data-parallel

`examples/gpt_mesh.py` writes a GPT decoder the same way (`batch`, `seq`, `heads`, `mlp`,
`embed`, `vocab`) and picks where the axes live with `axis_resources` only. Under
`torchrun --nproc-per-node=4 examples/gpt_mesh.py` it runs on a 2x2 mesh with
`{'batch': 'dp', 'heads': 'mp', 'mlp': 'mp'}`: parameters made shard by shard, each rank
loading only its rows, gradients and Adam state sharded. In this notebook's one process
we run its two other modes, vectorized and `SerialLoop(2)` on `batch`: the loss curves
are the same to float rounding (and so is the mesh's, `tests/parallel/test_gpt_mesh.py`).
"""),
    code("""
import importlib, sys
sys.path.insert(0, str(repo / 'examples'))
gpt_mesh = importlib.import_module('gpt_mesh')
small = ['--steps', '5', '--layers', '1', '--embed', '32', '--mlp', '128', '--dtype', 'float64', '--quiet']
vec = gpt_mesh.main(small + ['--mode', 'vectorized'])
loop = gpt_mesh.main(small + ['--mode', 'serial'])
print('vectorized    ', [round(v, 6) for v in vec['losses']])
print('SerialLoop(2) ', [round(v, 6) for v in loop['losses']])
diff = max(abs(a - b) for a, b in zip(vec['losses'], loop['losses']))
print('agree to float rounding (largest difference < 1e-12):', diff < 1e-12)
"""),
]


def build(name: str, execute: bool = True) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in NOTEBOOKS[name]]
    path = HERE / f"{name}.ipynb"
    if execute:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()
    nbformat.write(nb, path)
    print("wrote", path)


if __name__ == "__main__":
    for n in sys.argv[1:] or list(NOTEBOOKS):
        build(n)
