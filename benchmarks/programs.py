"""The benchmark programs (P1–P3), each written once per variant.

Variant keys (table columns):

- ``eager``          plain positional PyTorch, eager (the reference: ratio 1.0)
- ``compile``        the same under ``torch.compile`` (inductor); backward via autograd
- ``vmap``           ``torch.func.vmap`` over the batch axis (per-example program)
- ``fdim``           ``functorch.dim`` first-class dims
- ``nx.xmap``        ``named_axes`` eager: ``nx.xmap(named program)`` + ``torch.autograd.grad``
- ``nx.vg``          ``named_axes`` eager ``nx.value_and_grad(nx.xmap(...))`` (no jit)
- ``nx.jit``         ``nx.jit(nx.value_and_grad(nx.xmap(...)))`` — the whole step, one graph
- ``nx.jit.fb``      ``nx.jit(nx.xmap(...))`` forward, backward by ``torch.autograd.grad``
                     (compiled forward + backward through AOT autograd)
- ``nx.jit.det``     extra: ``nx.jit`` step with *detached* weights (requires_grad=False)

All torch/named_axes variants hold their weights as ``nn.Parameter`` (requires_grad=True),
as a user's model does, except the labelled ``nx.jit.det`` extra.

Training steps (``*_train`` programs: forward, backward and an Adam update):

- ``eager``          ``loss.backward()`` + ``torch.optim.Adam.step()`` on nn.Parameters
- ``compile``        ``torch.compile`` of that same step function
- ``nx.jit``         ``nx.jit`` of a functional step: ``nx.value_and_grad`` + hand-written
                     Adam (new parameters and moments returned), one compiled program
- ``jax.jit``        ``jax.jit`` of ``value_and_grad`` + the same hand-written Adam
- ``jax.jit``        JAX ``jit(value_and_grad(vmap(...)))`` on CPU (when JAX is installed)
- ``jax.xmap``       JAX 0.4.30's own ``xmap`` (when that JAX is installed)

Each ``make_*`` returns a list of :class:`harness.Variant`; anything missing raises
:class:`harness.NotAvailable` at build time, so the suite runs at every stage of the
library.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from harness import NotAvailable, Variant

# ---------------------------------------------------------------------------------
# optional imports, resolved lazily
# ---------------------------------------------------------------------------------


def nx_module():
    try:
        import named_axes as nx
    except Exception as e:  # noqa: BLE001 - any import failure means "not there yet"
        raise NotAvailable(f"import named_axes failed ({type(e).__name__})") from None
    if hasattr(nx, "enable_dynamo_matmul"):   # the programs write `x @ w` (a dynamo bug)
        nx.enable_dynamo_matmul()
    return nx


def need(obj: Any, *attrs: str) -> None:
    """Raise NotAvailable unless ``obj`` has every dotted attribute in ``attrs``."""
    for a in attrs:
        cur = obj
        for part in a.split("."):
            if not hasattr(cur, part):
                raise NotAvailable(f"nx.{a} not available")
            cur = getattr(cur, part)


def jax_modules():
    try:
        import jax
        import jax.numpy as jnp
    except Exception:
        raise NotAvailable("jax not installed") from None
    jax.config.update("jax_platforms", "cpu")
    return jax, jnp


def jax_xmap():
    jax, jnp = jax_modules()
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from jax.experimental.maps import xmap
    except Exception:
        raise NotAvailable(f"jax {jax.__version__} has no xmap (needs jax==0.4.30)") from None
    return jax, jnp, xmap


def fdim_dims():
    try:
        from functorch.dim import dims
    except Exception:
        raise NotAvailable("functorch.dim not importable") from None
    return dims


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _jax_step(fn: Callable, *args) -> Callable:
    import jax

    def step():
        return jax.block_until_ready(fn(*args))
    return step


def _grad_step(loss_fn: Callable, params: tuple, *rest) -> Callable:
    """A step that returns (loss, *grads) using torch.autograd.grad on ``params``."""
    def step():
        loss = loss_fn(*params, *rest)
        grads = torch.autograd.grad(loss, params)
        return (loss.detach(), *grads)
    return step


# torch.compile's ``mode`` for every compiled variant (torch.compile, torch.compile of the
# named program, nx.jit): ``run.py --mode max-autotune`` sets it; None is the default mode.
MODE: str | None = None


def _compiled(fn: Callable) -> Callable:
    torch._dynamo.reset()
    return torch.compile(fn, mode=MODE)


# =================================================================================
# P1: the xmap tutorial's loss and gradients
# =================================================================================

def p1_data(batch: int, n_in: int, n_hidden: int, n_classes: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(n_in, n_hidden, generator=g) / math.sqrt(n_in)
    w2 = torch.randn(n_hidden, n_classes, generator=g) / math.sqrt(n_hidden)
    images = torch.randn(batch, n_in, generator=g)
    labels = torch.randint(0, n_classes, (batch,), generator=g)
    return w1, w2, images, labels


def p1_loss(w1, w2, images, labels):
    hidden = torch.relu(images @ w1)
    logits = hidden @ w2
    predictions = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    targets = F.one_hot(labels, predictions.shape[-1])
    losses = torch.sum(targets * predictions, dim=1)
    return -torch.mean(losses, dim=0)


def p1_example_loss(w1, w2, image, label):
    hidden = torch.relu(image @ w1)
    logits = hidden @ w2
    predictions = logits - torch.logsumexp(logits, dim=0)
    targets = F.one_hot(label, predictions.shape[-1])
    return torch.sum(targets * predictions)


P1_IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...],
              ["batch", "inputs", ...], ["batch", ...]]


def p1_named_loss(nx):
    """The tutorial's ``named_loss``, with nx.lax when present, else NamedTensor methods."""
    lax = getattr(nx, "lax", None)
    has_lax = lax is not None and all(hasattr(lax, f) for f in ("pdot", "psum", "pmean"))
    need(nx, "one_hot")
    one_hot = nx.one_hot

    if has_lax:
        def named_predict(w1, w2, image):
            hidden = torch.relu(lax.pdot(image, w1, "inputs"))
            logits = lax.pdot(hidden, w2, "hidden")
            return logits - nx.logsumexp(logits, "classes")

        def named_loss(w1, w2, images, labels):
            predictions = named_predict(w1, w2, images)
            num_classes = lax.psum(1, "classes")
            targets = one_hot(labels, num_classes, dim="classes")
            losses = lax.psum(targets * predictions, "classes")
            return -lax.pmean(losses, "batch")
        named_loss.flavour = "nx.lax"
    else:
        def named_loss(w1, w2, images, labels):
            hidden = torch.relu(torch.einsum("{batch,inputs},{inputs,hidden}->{batch,hidden}",
                                             images, w1))
            logits = torch.einsum("{batch,hidden},{hidden,classes}->{batch,classes}", hidden, w2)
            predictions = logits - logits.logsumexp("classes")
            num_classes = w2.named_shape["classes"]
            targets = one_hot(labels, num_classes, dim="classes")
            losses = (targets * predictions).sum("classes")
            return -losses.mean("batch")
        named_loss.flavour = "methods"
    return named_loss


def make_p1(batch, n_in, n_hidden, n_classes, *, rtol=1e-4, atol=1e-5) -> list[Variant]:
    w1, w2, images, labels = p1_data(batch, n_in, n_hidden, n_classes)
    # the weights as a user holds them: nn.Parameters (requires_grad=True)
    params = (torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone()))

    def eager():
        return _grad_step(p1_loss, params, images, labels)

    def compile_():
        return _grad_step(_compiled(p1_loss), params, images, labels)

    def vmap():
        per_ex = torch.func.vmap(p1_example_loss, in_dims=(None, None, 0, 0))

        def loss(w1, w2, images, labels):
            return -per_ex(w1, w2, images, labels).mean()
        return _grad_step(loss, params, images, labels)

    def fdim():
        # first-class dims for batch and classes; matmuls stay positional (functorch.dim's
        # lazy `(a * b).sum(d)` dot materializes the product in torch 2.13: 10x slower)
        dims = fdim_dims()

        def loss(w1, w2, images, labels):
            b, c = dims(2)
            hidden = torch.relu(images[b] @ w1)
            logits = (hidden @ w2)[c]
            predictions = logits - logits.logsumexp(c)
            targets = (labels[b] == c).to(predictions.dtype)
            return -(targets * predictions).sum(c).mean(b)
        return _grad_step(loss, params, images, labels)

    def nx_xmap():
        nx = nx_module()
        need(nx, "xmap")
        f = nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...])
        return _grad_step(f, params, images, labels)

    def nx_compile():   # torch.compile of the named program, beside compile_'s twin
        nx = nx_module()
        need(nx, "xmap")
        f = _compiled(nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...]))
        return _grad_step(f, params, images, labels)

    def nx_vg():
        nx = nx_module()
        need(nx, "xmap", "value_and_grad")
        f = nx.value_and_grad(nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...]),
                              argnums=(0, 1))
        return lambda: _flat_vg(f(*params, images, labels))

    def _nx_jit_vg():
        nx = nx_module()
        need(nx, "xmap", "value_and_grad", "jit")
        return nx.jit(nx.value_and_grad(
            nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...]), argnums=(0, 1)),
            mode=MODE)

    def nx_jit():
        f = _nx_jit_vg()
        return lambda: _flat_vg(f(*params, images, labels))

    def nx_jit_fb():
        nx = nx_module()
        need(nx, "xmap", "jit")
        f = nx.jit(nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...]), mode=MODE)
        return _grad_step(f, params, images, labels)

    def nx_jit_det():
        f = _nx_jit_vg()
        return lambda: _flat_vg(f(w1, w2, images, labels))

    def jax_jit():
        jax, jnp = jax_modules()
        from jax.nn import one_hot, relu
        from jax.scipy.special import logsumexp

        def example_loss(w1, w2, image, label):
            hidden = relu(image @ w1)
            logits = hidden @ w2
            predictions = logits - logsumexp(logits)
            return jnp.sum(one_hot(label, n_classes) * predictions)

        def loss(w1, w2, images, labels):
            return -jnp.mean(jax.vmap(example_loss, (None, None, 0, 0))(w1, w2, images, labels))
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        args = [jnp.asarray(_np(t)) for t in (w1, w2, images, labels)]
        return _jax_step(f, *args)

    def jax_xmap_():
        jax, jnp, xmap = jax_xmap()
        from jax import lax
        from jax.nn import one_hot, relu
        from jax.scipy.special import logsumexp

        def named_predict(w1, w2, image):
            hidden = relu(lax.pdot(image, w1, "inputs"))
            logits = lax.pdot(hidden, w2, "hidden")
            return logits - logsumexp(logits, "classes")

        def named_loss(w1, w2, images, labels):
            predictions = named_predict(w1, w2, images)
            num_classes = lax.psum(1, "classes")
            targets = one_hot(labels, num_classes, axis="classes")
            losses = lax.psum(targets * predictions, "classes")
            return -lax.pmean(losses, "batch")
        loss = xmap(named_loss, in_axes=P1_IN_AXES, out_axes=[...])
        f = jax.value_and_grad(loss, argnums=(0, 1))
        args = [jnp.asarray(_np(t)) for t in (w1, w2, images, labels)]
        return _jax_step(f, *args)

    return _variants(locals(), rtol, atol)


def _flat_vg(out):
    value, grads = out
    if isinstance(grads, (tuple, list)):
        return (value, *grads)
    return (value, grads)


def _variants(ns: dict, rtol: float, atol: float) -> list[Variant]:
    table = [("eager", "eager"), ("compile", "compile_"), ("vmap", "vmap"), ("fdim", "fdim"),
             ("nx.xmap", "nx_xmap"), ("nx.compile", "nx_compile"), ("nx.vg", "nx_vg"),
             ("nx.jit", "nx_jit"),
             ("nx.jit.fb", "nx_jit_fb"), ("jax.jit", "jax_jit"), ("jax.xmap", "jax_xmap_"),
             ("nx.jit.det", "nx_jit_det")]
    return [Variant(key, ns[fn], rtol=rtol, atol=atol,
                    known_limit="JAX 0.4.30 xmap limitation" if key == "jax.xmap" else "")
            for key, fn in table if fn in ns]


# =================================================================================
# P2: multi-head attention + MLP block, forward + backward
# =================================================================================

def p2_data(batch=8, seq=128, heads=8, head_dim=32, model=256, ff=1024, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale):
        return torch.randn(*shape, generator=g) * scale
    x = r(batch, seq, model, scale=1.0)
    params = dict(
        g1=1 + r(model, scale=0.1), b1=r(model, scale=0.1),
        wq=r(model, heads, head_dim, scale=model ** -0.5),
        wk=r(model, heads, head_dim, scale=model ** -0.5),
        wv=r(model, heads, head_dim, scale=model ** -0.5),
        wo=r(heads, head_dim, model, scale=(heads * head_dim) ** -0.5),
        g2=1 + r(model, scale=0.1), b2=r(model, scale=0.1),
        w1=r(model, ff, scale=model ** -0.5), c1=r(ff, scale=0.1),
        w2=r(ff, model, scale=ff ** -0.5), c2=r(model, scale=0.1),
    )
    return x, params


P2_PARAMS = ("g1", "b1", "wq", "wk", "wv", "wo", "g2", "b2", "w1", "c1", "w2", "c2")


def p2_loss(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
    """Positional block on x: (batch, seq, model); loss = mean(out ** 2)."""
    D = x.shape[-1]
    K = wq.shape[-1]
    h = F.layer_norm(x, (D,), g1, b1)
    q = torch.einsum("bsd,dhk->bhsk", h, wq)
    k = torch.einsum("bsd,dhk->bhsk", h, wk)
    v = torch.einsum("bsd,dhk->bhsk", h, wv)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(K), dim=-1)
    o = a @ v
    x = x + torch.einsum("bhsk,hkd->bsd", o, wo)
    h2 = F.layer_norm(x, (D,), g2, b2)
    x = x + F.gelu(h2 @ w1 + c1) @ w2 + c2
    return (x * x).mean()


def p2_example_loss(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
    """Per-example block on x: (seq, model); returns sum over (seq, model) of out ** 2."""
    D = x.shape[-1]
    K = wq.shape[-1]
    h = F.layer_norm(x, (D,), g1, b1)
    q = torch.einsum("sd,dhk->hsk", h, wq)
    k = torch.einsum("sd,dhk->hsk", h, wk)
    v = torch.einsum("sd,dhk->hsk", h, wv)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(K), dim=-1)
    x = x + torch.einsum("hsk,hkd->sd", a @ v, wo)
    h2 = F.layer_norm(x, (D,), g2, b2)
    x = x + F.gelu(h2 @ w1 + c1) @ w2 + c2
    return (x * x).sum()


# in_axes for the named program: x twice (as queries: batch, seq; as keys/values:
# batch, kv), per-head projections named by 'heads'.
P2_IN_AXES = ({0: "batch", 1: "seq"}, {0: "batch", 1: "kv"}, {}, {},
              {1: "heads"}, {1: "heads"}, {1: "heads"}, {0: "heads"},
              {}, {}, {}, {}, {}, {})


def p2_named_loss(nx):
    """The block per (batch, seq[, kv], heads): positional axes are model / head_dim only."""
    lax = getattr(nx, "lax", None)
    has_lax = lax is not None and hasattr(lax, "pmean") and hasattr(lax, "psum")
    has_einsum = hasattr(nx, "einsum")

    def block(x, xkv, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
        D = x.shape[-1]
        K = wq.shape[-1]
        h = F.layer_norm(x, (D,), g1, b1)              # {batch, seq} (D,)
        hkv = F.layer_norm(xkv, (D,), g1, b1)          # {batch, kv} (D,)
        q = h @ wq                                     # {batch, seq, heads} (K,)
        k = hkv @ wk                                   # {batch, kv, heads} (K,)
        v = hkv @ wv
        s = torch.einsum("k,k->", q, k) / math.sqrt(K)  # {batch, seq, kv, heads} ()
        a = s.softmax("kv")
        if has_einsum:
            o = torch.einsum("{batch,seq,heads,kv},{batch,kv,heads}k->{batch,seq,heads}k",
                             a, v)                # {batch, seq, heads} (K,)
        else:  # slow: materializes {batch, seq, kv, heads} (K,)
            o = (a.unsqueeze(-1) * v).sum("kv")
        if has_lax:
            y = lax.psum(o @ wo, "heads")              # {batch, seq} (D,)
        else:
            y = (o @ wo).sum("heads")
        x = x + y
        h2 = F.layer_norm(x, (D,), g2, b2)
        x = x + F.gelu(h2 @ w1 + c1) @ w2 + c2
        per = (x * x).mean()
        if has_lax:
            return lax.pmean(per, ("batch", "seq"))
        return per.mean(("batch", "seq"))
    return block


def make_p2(*, rtol=2e-4, atol=2e-5, **sizes) -> list[Variant]:
    x, p = p2_data(**sizes)
    plist = tuple(p[k] for k in P2_PARAMS)
    params = tuple(torch.nn.Parameter(t.clone()) for t in plist)   # as a user holds them
    D = x.shape[-1]

    def eager():
        return _grad_step(lambda *ps: p2_loss(x, *ps), params)

    def compile_():
        f = _compiled(p2_loss)
        return _grad_step(lambda *ps: f(x, *ps), params)

    def vmap():
        per_ex = torch.func.vmap(p2_example_loss, in_dims=(0,) + (None,) * len(P2_PARAMS))
        n = x.shape[1] * x.shape[2]

        def loss(*ps):
            return per_ex(x, *ps).mean() / n
        return _grad_step(loss, params)

    def fdim():
        # batch as a first-class dim over the per-example program. Binding seq / heads as
        # first-class dims too makes `h @ wq[:, hd]` a broadcasting batched matmul that
        # materializes the expanded weight (≈ 30× slower in torch 2.13), and the lazy
        # `(a * b).sum(d)` dot materializes the product.
        dims = fdim_dims()
        n = x.shape[1] * x.shape[2]

        def loss(*ps):
            b = dims(1)
            return p2_example_loss(x[b], *ps).mean(b) / n
        return _grad_step(loss, params)

    def _nx_f(nx):
        need(nx, "xmap")
        return nx.xmap(p2_named_loss(nx), in_axes=P2_IN_AXES, out_axes=[...])

    def nx_xmap():
        f = _nx_f(nx_module())
        return _grad_step(lambda *ps: f(x, x, *ps), params)

    def nx_compile():
        f = _compiled(_nx_f(nx_module()))
        return _grad_step(lambda *ps: f(x, x, *ps), params)

    def nx_vg():
        nx = nx_module()
        need(nx, "value_and_grad")
        f = nx.value_and_grad(_nx_f(nx), argnums=tuple(range(2, 2 + len(P2_PARAMS))))
        return lambda: _flat_vg(f(x, x, *params))

    def _nx_jit_vg():
        nx = nx_module()
        need(nx, "value_and_grad", "jit")
        return nx.jit(nx.value_and_grad(_nx_f(nx), argnums=tuple(range(2, 2 + len(P2_PARAMS)))),
                      mode=MODE)

    def nx_jit():
        f = _nx_jit_vg()
        return lambda: _flat_vg(f(x, x, *params))

    def nx_jit_fb():
        nx = nx_module()
        need(nx, "jit")
        f = nx.jit(_nx_f(nx), mode=MODE)
        return _grad_step(lambda *ps: f(x, x, *ps), params)

    def nx_jit_det():
        f = _nx_jit_vg()
        return lambda: _flat_vg(f(x, x, *plist))

    def jax_jit():
        jax, jnp = jax_modules()

        def layer_norm(t, g, b):
            mu = t.mean(-1, keepdims=True)
            var = ((t - mu) ** 2).mean(-1, keepdims=True)
            return (t - mu) / jnp.sqrt(var + 1e-5) * g + b

        def example(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
            K = wq.shape[-1]
            h = layer_norm(x, g1, b1)
            q = jnp.einsum("sd,dhk->hsk", h, wq)
            k = jnp.einsum("sd,dhk->hsk", h, wk)
            v = jnp.einsum("sd,dhk->hsk", h, wv)
            a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(K), axis=-1)
            x = x + jnp.einsum("hsk,hkd->sd", a @ v, wo)
            h2 = layer_norm(x, g2, b2)
            x = x + jax.nn.gelu(h2 @ w1 + c1, approximate=False) @ w2 + c2
            return (x * x).sum()

        n = x.shape[1] * x.shape[2]

        def loss(ps, x):
            return jax.vmap(example, (0,) + (None,) * len(P2_PARAMS))(x, *ps).mean() / n
        vg = jax.jit(jax.value_and_grad(loss))
        jps = tuple(jnp.asarray(_np(t)) for t in plist)
        jx = jnp.asarray(_np(x))
        return _jax_step(lambda: _flat_vg(vg(jps, jx)))

    return _variants(locals(), rtol, atol)


# =================================================================================
# Training steps: forward, backward and an Adam update
# =================================================================================

ADAM_LR, ADAM_B1, ADAM_B2, ADAM_EPS = 1e-3, 0.9, 0.999, 1e-8


def _adam(params, grads, m, v, t, sqrt):
    """A hand-written Adam update (torch.optim.Adam's formula); ``t`` is the new step."""
    bc1 = 1 - ADAM_B1 ** t
    bc2 = 1 - ADAM_B2 ** t
    new_p, new_m, new_v = [], [], []
    for p, g, mi, vi in zip(params, grads, m, v):
        mi = ADAM_B1 * mi + (1 - ADAM_B1) * g
        vi = ADAM_B2 * vi + (1 - ADAM_B2) * g * g
        new_p.append(p - (ADAM_LR / bc1) * mi / (sqrt(vi) / sqrt(bc2) + ADAM_EPS))
        new_m.append(mi)
        new_v.append(vi)
    return tuple(new_p), tuple(new_m), tuple(new_v)


def _train_variants(loss, nx_vg_of, jax_loss_of, plist, data, rtol, atol) -> list[Variant]:
    """Training-step variants: ``loss(*params, *data)`` (positional torch),
    ``nx_vg_of(nx)`` -> ``vg(params, data) -> (loss, grads)``, ``jax_loss_of(jax, jnp)``
    -> ``loss(params, data)``.  Each step returns (loss, *updated params)."""

    def _torch_step():
        params = [torch.nn.Parameter(t.clone()) for t in plist]
        opt = torch.optim.Adam(params, lr=ADAM_LR, betas=(ADAM_B1, ADAM_B2), eps=ADAM_EPS)

        def step():
            opt.zero_grad(set_to_none=True)
            out = loss(*params, *data)
            out.backward()
            opt.step()
            return (out.detach(), *[p.detach() for p in params])
        return step

    def eager():
        return _torch_step()

    def compile_():
        torch._dynamo.reset()
        return torch.compile(_torch_step(), mode=MODE)

    def nx_jit():
        nx = nx_module()
        need(nx, "value_and_grad", "jit")
        vg = nx_vg_of(nx)

        def step(params, m, v, t, data):
            value, grads = vg(params, data)
            t = t + 1
            params, m, v = _adam(params, grads, m, v, t, torch.sqrt)
            return value, params, m, v, t
        f = nx.jit(step, mode=MODE)
        state = [tuple(torch.nn.Parameter(t.clone()) for t in plist),
                 tuple(torch.zeros_like(t) for t in plist),
                 tuple(torch.zeros_like(t) for t in plist), torch.tensor(0.0)]

        def run():
            value, *state[:] = f(*state, data)
            return (value, *state[0])
        return run

    def jax_jit():
        jax, jnp = jax_modules()
        vg = jax.value_and_grad(jax_loss_of(jax, jnp))

        def step(params, m, v, t, data):
            value, grads = vg(params, data)
            t = t + 1
            params, m, v = _adam(params, grads, m, v, t, jnp.sqrt)
            return value, params, m, v, t
        f = jax.jit(step)
        ps = tuple(jnp.asarray(_np(t)) for t in plist)
        state = [ps, tuple(jnp.zeros_like(t) for t in ps), tuple(jnp.zeros_like(t) for t in ps),
                 jnp.asarray(0.0, dtype=jnp.float32)]
        jdata = tuple(jnp.asarray(_np(t)) for t in data)

        def run():
            value, *state[:] = f(*state, jdata)
            return jax.block_until_ready((value, *state[0]))
        return run

    return [Variant(k, fn, rtol=rtol, atol=atol) for k, fn in
            (("eager", eager), ("compile", compile_), ("nx.jit", nx_jit), ("jax.jit", jax_jit))]


def make_p1_train(batch, n_in, n_hidden, n_classes, *, rtol=1e-4, atol=1e-5) -> list[Variant]:
    w1, w2, images, labels = p1_data(batch, n_in, n_hidden, n_classes)

    def nx_vg_of(nx):
        need(nx, "xmap")
        vg = nx.value_and_grad(nx.xmap(p1_named_loss(nx), in_axes=P1_IN_AXES, out_axes=[...]),
                               argnums=(0, 1))
        return lambda ps, data: vg(*ps, *data)

    def jax_loss_of(jax, jnp):
        from jax.nn import one_hot, relu
        from jax.scipy.special import logsumexp

        def example_loss(w1, w2, image, label):
            logits = relu(image @ w1) @ w2
            return jnp.sum(one_hot(label, n_classes) * (logits - logsumexp(logits)))

        def loss(ps, data):
            return -jnp.mean(jax.vmap(example_loss, (None, None, 0, 0))(*ps, *data))
        return loss
    return _train_variants(p1_loss, nx_vg_of, jax_loss_of, (w1, w2), (images, labels),
                           rtol, atol)


def make_p2_train(*, rtol=2e-4, atol=2e-5, **sizes) -> list[Variant]:
    x, p = p2_data(**sizes)
    plist = tuple(p[k] for k in P2_PARAMS)
    n = x.shape[1] * x.shape[2]

    def nx_vg_of(nx):
        need(nx, "xmap")
        f = nx.xmap(p2_named_loss(nx), in_axes=P2_IN_AXES, out_axes=[...])
        vg = nx.value_and_grad(f, argnums=tuple(range(2, 2 + len(P2_PARAMS))))
        return lambda ps, data: vg(data[0], data[0], *ps)

    def jax_loss_of(jax, jnp):
        example = _p2_jax_example(jax, jnp)

        def loss(ps, data):
            return jax.vmap(example, (0,) + (None,) * len(P2_PARAMS))(data[0], *ps).mean() / n
        return loss
    def loss(*args):   # (*params, x): the training step's order; p2_loss takes x first
        return p2_loss(args[-1], *args[:-1])
    return _train_variants(loss, nx_vg_of, jax_loss_of, plist, (x,), rtol, atol)


def _p2_jax_example(jax, jnp):
    def layer_norm(t, g, b):
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) / jnp.sqrt(var + 1e-5) * g + b

    def example(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
        K = wq.shape[-1]
        h = layer_norm(x, g1, b1)
        q = jnp.einsum("sd,dhk->hsk", h, wq)
        k = jnp.einsum("sd,dhk->hsk", h, wk)
        v = jnp.einsum("sd,dhk->hsk", h, wv)
        a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(K), axis=-1)
        x = x + jnp.einsum("hsk,hkd->sd", a @ v, wo)
        h2 = layer_norm(x, g2, b2)
        x = x + jax.nn.gelu(h2 @ w1 + c1, approximate=False) @ w2 + c2
        return (x * x).sum()
    return example


# =================================================================================
# P3: a chain of 50 small elementwise ops on (8, 16), both axes named (forward)
# =================================================================================

N_OPS = 50


def p3_chain(x, y):
    """50 elementwise ops; written with operators and torch functions only."""
    for i in range(N_OPS // 5):
        x = x * 0.9
        x = x + y
        x = torch.tanh(x)
        x = x * y
        x = torch.sin(x)
    return x


def p3_chain_jax(jnp):
    def chain(x, y):
        for _ in range(N_OPS // 5):
            x = x * 0.9
            x = x + y
            x = jnp.tanh(x)
            x = x * y
            x = jnp.sin(x)
        return x
    return chain


def make_p3(shape=(8, 16), *, rtol=1e-5, atol=1e-6) -> list[Variant]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    y = torch.randn(*shape, generator=g)

    def eager():
        return lambda: p3_chain(x, y)

    def compile_():
        f = _compiled(p3_chain)
        return lambda: f(x, y)

    def vmap():
        f = torch.func.vmap(torch.func.vmap(p3_chain))
        return lambda: f(x, y)

    def fdim():
        dims = fdim_dims()

        def f(x, y):
            a, b = dims(2)
            return p3_chain(x[a, b], y[a, b]).order(a, b)
        return lambda: f(x, y)

    def nx_xmap():
        nx = nx_module()
        need(nx, "xmap")
        f = nx.xmap(p3_chain, in_axes=["a", "b", ...], out_axes=["a", "b", ...])
        return lambda: f(x, y)

    def nx_compile():
        nx = nx_module()
        need(nx, "xmap")
        f = _compiled(nx.xmap(p3_chain, in_axes=["a", "b", ...], out_axes=["a", "b", ...]))
        return lambda: f(x, y)

    def nx_jit():
        nx = nx_module()
        need(nx, "xmap", "jit")
        f = nx.jit(nx.xmap(p3_chain, in_axes=["a", "b", ...], out_axes=["a", "b", ...]),
                   mode=MODE)
        return lambda: f(x, y)

    def jax_jit():
        jax, jnp = jax_modules()
        f = jax.jit(jax.vmap(jax.vmap(p3_chain_jax(jnp))))
        return _jax_step(f, jnp.asarray(_np(x)), jnp.asarray(_np(y)))

    def jax_xmap_():
        jax, jnp, xmap = jax_xmap()
        f = xmap(p3_chain_jax(jnp), in_axes=["a", "b", ...], out_axes=["a", "b", ...])
        return _jax_step(f, jnp.asarray(_np(x)), jnp.asarray(_np(y)))

    return _variants(locals(), rtol, atol)


PROGRAMS: dict[str, tuple[str, Callable[[], list[Variant]]]] = {
    "p1_small": ("P1 tutorial loss+grads, small (8, 16, 16, 4)",
                 lambda: make_p1(8, 16, 16, 4)),
    "p1_tutorial": ("P1 tutorial loss+grads, tutorial size (128, 784, 512, 10)",
                    lambda: make_p1(128, 784, 512, 10, rtol=1e-3, atol=1e-5)),
    "p2_attention": ("P2 attention + MLP block fwd+bwd (8, 128, 8×32, 256)",
                     lambda: make_p2()),
    "p3_chain": ("P3 50 elementwise ops on (8, 16), forward", lambda: make_p3()),
    "p1_small_train": ("P1 small training step: loss, grads, Adam update",
                       lambda: make_p1_train(8, 16, 16, 4)),
    "p1_tutorial_train": ("P1 tutorial-size training step: loss, grads, Adam update",
                          # Adam divides by sqrt(v): a gradient entry near 0 turns float
                          # rounding into up to lr-sized differences in the updated weight
                          lambda: make_p1_train(128, 784, 512, 10, rtol=1e-3, atol=1e-4)),
    "p2_attention_train": ("P2 attention block training step: loss, grads, Adam update",
                           lambda: make_p2_train()),
}
