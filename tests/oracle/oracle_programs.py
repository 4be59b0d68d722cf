"""Program categories for the oracle generator, and ``generate(n, seed)``.

Each ``cat_*`` function fills a :class:`generator.Builder` (inputs, ops, outputs) and may
return keyword arguments for :func:`generator.finish` (the ``reject_*`` ones name the
single rule they break).  ``WEIGHTS`` sets how often each category is drawn; the
``nx.lax`` slicing and control-flow categories (``lax_programs.py``) take ``LAX_SHARE``
of the programs.  The first programs of every corpus are ``PINNED``: SPEC §4's
measured gradient examples.
"""
from __future__ import annotations

import random

from generator import POOL, Builder, Ty, finish
from lax_programs import cat_lax_grad, cat_lax_loop, cat_lax_shape, cat_lax_slice

PSHAPES = [(), (3,), (2,), (2, 3), (4,)]


def _shape(b):
    return b.rng.choice(PSHAPES)


def _sub_shape(b, p):
    return b.rng.choice([p, p, p[-1:], ()])


def _axes(rng, k=None):
    k = k or rng.choice([1, 2, 2, 3])
    names = rng.sample(POOL, k)
    return {n: rng.choice([1, 2, 2, 3, 4]) for n in names}


# -- categories -------------------------------------------------------------------------

def cat_elementwise(b):
    p = _shape(b)
    xs = [b.input(b.some_names(at_least=1), _sub_shape(b, p)) for _ in range(b.rng.randint(1, 3))]
    b.out(b.chain(xs, b.rng.randint(1, 4)))
    if b.rng.random() < 0.3:
        b.out(xs[0])


def cat_int(b):
    rng = b.rng
    p = _shape(b)
    xs = [b.input(b.some_names(at_least=1), _sub_shape(b, p), kind="i") for _ in range(rng.randint(1, 2))]
    x = b.chain(xs, rng.randint(0, 2))
    t = b.types[x]
    r = rng.random()
    if r < 0.4 and t.names:
        n = rng.choice(list(t.names))
        x = b.coll(x, rng.choice(["psum", "pmax", "pmin"]), rng.choice([n, [n]]))
    elif r < 0.6 and t.names:
        n = rng.choice(list(t.names))
        x = b.reduce(x, rng.choice(["sum", "amax", "amin"]), [n], rng.choice(["method", "nx"]))
    elif r < 0.8:
        n = rng.choice(list(b.axes))
        i = b.op(Ty({n: b.axes[n]}, (), "i"), op="axis_index", axes=n)
        x = b.bin(x, i, rng.choice(["add", "mul"]))
    elif t.names:
        n = rng.choice(list(t.names))
        names = {k: v for k, v in t.names.items() if k != n}
        x = b.op(Ty(names, (t.names[n],) + t.shape, "i"), op="all_gather", axes=n, axis=0,
                 tiled=False, **{"in": [x]})
    b.out(x)


def cat_reduce(b):
    rng = b.rng
    kind = "i" if rng.random() < 0.2 else "f"
    p = rng.choice([(), (3,), (2, 3)])
    x = b.input(b.some_names(at_least=1), p, kind=kind)
    x = b.chain([x], rng.randint(0, 1))
    t = b.types[x]
    f = rng.choice(["sum", "amax", "amin"] + (["mean", "sum"] if kind == "f" else []))
    names = [n for n in t.names if rng.random() < 0.6] or [rng.choice(list(t.names))]
    ints = [i for i in range(len(t.shape)) if rng.random() < 0.4]
    ints = [i - len(t.shape) if rng.random() < 0.3 else i for i in ints]
    r = rng.random()
    if r < 0.15 and ints:        # positional only
        axes, style = ints, rng.choice(["torch", "method", "nx"])
    else:
        axes = names + ints
        rng.shuffle(axes)
        style = rng.choice(["method", "nx", "axis"])
        if len(axes) == 1 and f in ("amax", "amin") and rng.random() < 0.5:
            style = "maxpair"    # x.max('b')[0]
    b.out(b.reduce(x, f, axes, style))


def cat_preduce(b):
    rng = b.rng
    p = rng.choice([(), (3,), (2, 3)])
    x = b.input(b.some_names(at_least=1), p)
    x = b.chain([x], rng.randint(0, 1))
    t = b.types[x]
    f = rng.choice(["psum", "pmean", "pmax", "pmin"])
    names = list(t.names)
    r = rng.random()
    if r < 0.3:
        axes = rng.choice(names)
    elif r < 0.45:
        axes = [rng.choice(names)]
    elif r < 0.6 and len(b.axes) > 1:
        axes = rng.sample(list(b.axes), 2)
        axes = [a for a in axes if a in t.names] or [names[0]]
    elif r < 0.8 and t.shape:
        if f == "pmean":    # JAX 0.4.30's pmean divides by psum(1, axes): no positions
            f = rng.choice(["psum", "pmax", "pmin"])
        axes = [rng.choice(names), rng.choice([0, len(t.shape) - 1])]
        rng.shuffle(axes)
    elif r < 0.9:
        axes = []
    else:
        absent = [n for n in b.axes if n not in t.names]
        axes = rng.choice(absent) if absent else names[0]
    y = b.coll(x, f, axes)
    if rng.random() < 0.4:
        y = b.bin(y, x)
    b.out(y)


def cat_movement(b):
    rng = b.rng
    n = rng.choice(list(b.axes))
    s = b.axes[n]
    others = [m for m in b.some_names(0.4) if m != n]
    sub = rng.choice(["pshuffle", "ppermute", "all_gather", "all_gather", "all_to_all",
                      "psum_scatter", "pdot", "axis_index"])
    if sub in ("pshuffle", "ppermute"):
        x = b.input([n] + others, rng.choice([(), (3,)]))
        t = b.types[x]
        perm = list(range(s))
        rng.shuffle(perm)
        if sub == "ppermute":
            pairs = [[i, perm[i]] for i in range(s)]   # JAX's xmap takes only full ones
            rng.shuffle(pairs)
            y = b.op(Ty(dict(t.names), t.shape), op="ppermute", axes=n, perm=pairs, **{"in": [x]})
        else:
            y = b.op(Ty(dict(t.names), t.shape), op="pshuffle", axes=n, perm=perm, **{"in": [x]})
    elif sub == "all_gather":
        p = rng.choice([(), (3,), (2, 3)])
        x = b.input([n] + others, p)
        tiled = bool(p) and rng.random() < 0.4
        k = rng.randrange(len(p) + (0 if tiled else 1))
        shape = list(p)
        if tiled:
            shape[k] *= s
        else:
            shape.insert(k, s)
        names = {m: b.axes[m] for m in others}
        y = b.op(Ty(names, tuple(shape)), op="all_gather", axes=n, axis=k, tiled=tiled,
                 **{"in": [x]})
    elif sub == "all_to_all":
        tiled = rng.random() < 0.4
        m = 2 if tiled else 1
        p = rng.choice([[s * m], [s * m, 3], [2, s * m]])
        split = p.index(s * m)
        concat = rng.randrange(len(p))
        x = b.input([n] + others, tuple(p))
        shape = list(p)
        if tiled:
            shape[split] //= s
            shape[concat] *= s
        else:
            del shape[split]
            shape.insert(concat, s)
        y = b.op(Ty({**{m_: b.axes[m_] for m_ in others}, n: s}, tuple(shape)),
                 op="all_to_all", axes=n, split=split, concat=concat, tiled=tiled, **{"in": [x]})
    elif sub == "psum_scatter":
        tiled = rng.random() < 0.4
        m = 2 if tiled else 1
        p = rng.choice([[s * m], [s * m, 3], [2, s * m]])
        d = p.index(s * m)
        x = b.input([n] + others, tuple(p))
        shape = list(p)
        if tiled:
            shape[d] //= s
        else:
            del shape[d]
        y = b.op(Ty({**{m_: b.axes[m_] for m_ in others}, n: s}, tuple(shape)),
                 op="psum_scatter", axes=n, dim=d, tiled=tiled, **{"in": [x]})
    elif sub == "pdot":
        pc = rng.random() < 0.5
        x = b.input([n] + others, (3,) if pc else rng.choice([(), (2,)]))
        y2 = b.input([n] + [m for m in b.some_names(0.4) if m != n], (3,) if pc else rng.choice([(), (3,)]))
        tx, ty = b.types[x], b.types[y2]
        names = {k: v for k, v in {**tx.names, **ty.names}.items() if k != n}
        shape = () if pc else tx.shape + ty.shape
        y = b.op(Ty(names, shape), op="pdot", axes=rng.choice([n, [n]]),
                 pos_contract=[[0], [0]] if pc else [[], []], **{"in": [x, y2]})
    else:
        names = rng.sample(list(b.axes), min(len(b.axes), rng.choice([1, 1, 2])))
        axes = names[0] if len(names) == 1 and rng.random() < 0.7 else names
        i = b.op(Ty({k: b.axes[k] for k in names}, (), "i"), op="axis_index", axes=axes)
        x = b.input(b.some_names(0.5), rng.choice([(), (3,)]))
        y = b.bin(i, x, rng.choice(["add", "mul"]))
    b.out(y)


def cat_einsum(b):
    rng = b.rng
    sizes = {"n": 2, "m": 3, "p": 2}
    nops = rng.choice([1, 2, 2, 2, 3])
    ops, pos, used_l, used_n = [], [], [], []
    for _ in range(nops):
        letters = "".join(rng.sample("nmp", rng.randint(0, 2)))
        names = b.some_names(0.5)
        ops.append(b.input(names, tuple(sizes[c] for c in letters)))
        pos.append(letters)
        used_l += [c for c in letters if c not in used_l]
        used_n += [n for n in names if n not in used_n]
    out_l = "".join(c for c in used_l if rng.random() < 0.5)
    out_n = [n for n in used_n if rng.random() < 0.5]
    def spell(letters, names):
        if not names:
            return letters
        return letters + "{" + ",".join(names) + "}"
    spec = ",".join(spell(l, [n for n in b.types[o].names]) for l, o in zip(pos, ops))
    spec += "->" + spell(out_l, out_n)
    y = b.op(Ty({n: b.axes[n] for n in out_n}, tuple(sizes[c] for c in out_l)), op="einsum",
             spec=spec, pos=",".join(pos) + "->" + out_l,
             contract=[n for n in used_n if n not in out_n], **{"in": ops})
    b.out(y)


def cat_one_hot(b):
    rng = b.rng
    free = [n for n in POOL if n not in b.axes]
    k = free[0]
    ncls = rng.choice([2, 3, 4])
    named = rng.random() < 0.7
    if named:
        b.axes[k] = ncls
        b.axis_sizes[k] = ncls
    lab = b.input(b.some_names(0.6), rng.choice([(), (2,)]), kind="i", rng_range=[0, ncls])
    tl = b.types[lab]
    if named:
        oh = b.op(Ty({**tl.names, k: ncls}, tl.shape, "i"), op="one_hot", n=ncls, dim=k,
                  **{"in": [lab]})
        w = b.input([k] + b.some_names(0.3), rng.choice([(), tl.shape]))
    else:
        oh = b.op(Ty(dict(tl.names), tl.shape + (ncls,), "i"), op="one_hot", n=ncls, dim=-1,
                  **{"in": [lab]})
        w = b.input(b.some_names(0.3), (ncls,))
    y = b.bin(oh, w, "mul")
    if named and rng.random() < 0.5:
        y = b.coll(y, "psum", k)
    b.out(y)


def _sub(b, axes, types):
    """A builder for a sub-body (shares the generator's rng)."""
    s = Builder(b.rng, axes)
    s.types = list(types)
    return s


def cat_nested(b):
    rng = b.rng
    z = next(n for n in ("z", "y") if n not in b.axes)
    sz = rng.choice([2, 3])
    p = rng.choice([(sz,), (sz, 2), (2, sz)])
    x = b.input(b.some_names(0.7), p)
    tx = b.types[x]
    zpos = p.index(sz)
    inner_t = Ty({**tx.names, z: sz}, tuple(d for i, d in enumerate(p) if i != zpos))
    s = _sub(b, {**b.axes, z: sz}, [inner_t])
    y = s.chain([0], rng.randint(0, 2))
    r = rng.random()
    if r < 0.35:
        y = s.coll(y, rng.choice(["psum", "pmax", "pmean"]), z)
    elif r < 0.6 and tx.names:
        y = s.coll(y, "psum", rng.choice(list(tx.names)))
    elif r < 0.8:
        i = s.op(Ty({z: sz}, (), "i"), op="axis_index", axes=z)
        y = s.bin(y, i, "mul")
    ty = s.types[y]
    from generator import destr, mapping_for, out_mapping
    in_map = destr([mapping_for(rng, {zpos: z}, len(p))])[0]   # it sits in a tuple
    out_map = out_mapping(rng, Ty({k: v for k, v in ty.names.items() if k == z}, ty.shape),
                          [z])
    placed = _placed(out_map, len(ty.shape))
    names = {k: v for k, v in ty.names.items() if k != z}
    shape = list(ty.shape)
    if placed is not None:
        shape.insert(placed, sz)
    out = b.op(Ty(names, tuple(shape) if placed is not None or True else None), op="xmap",
               in_axes={"tuple": [in_map]}, out_axes=out_map, body=s.ops, out={"ref": y},
               **{"in": [x]})
    b.out(out)


def _placed(m, rank):
    """Where a one-name out mapping puts its name in a result of inner rank ``rank``."""
    if m.get("map") == "dict":
        if not m["items"]:
            return None
        p = m["items"][0][0]
        return p if p >= 0 else p + rank + 1
    items = m.get("items") if "items" in m else m["s"].split()
    for i, it in enumerate(items):
        if it not in (None, "..."):
            return i
    return None


def cat_vmap(b):
    rng = b.rng
    v = next(n for n in ("v", "u") if n not in b.axes)
    sv = rng.choice([2, 3])
    p = rng.choice([(sv,), (sv, 2)])
    x = b.input(b.some_names(0.6), p)
    tx = b.types[x]
    inner = Ty({**tx.names, v: sv}, p[1:])
    s = _sub(b, {**b.axes, v: sv}, [inner])
    r = rng.random()
    if r < 0.3:
        y = s.coll(0, rng.choice(["psum", "pmean", "pmax"]), v)
    elif r < 0.5:
        y = s.bin(0, s.coll(0, "pmean", v), "sub")
    elif r < 0.7:
        y = s.op(Ty(dict(tx.names), (sv,) + p[1:]), op="all_gather", axes=v, axis=0,
                 tiled=False, **{"in": [0]})
    elif r < 0.85 and tx.names:
        y = s.coll(s.un(0), "psum", rng.choice(list(tx.names)))
    else:
        i = s.op(Ty({v: sv}, (), "i"), op="axis_index", axes=v)
        y = s.bin(0, i, "mul")
    ty = s.types[y]
    out = b.op(Ty({k: n for k, n in ty.names.items() if k != v}, (sv,) + ty.shape), op="vmap",
               in_dims=[0], axis_name=v, body=s.ops, out={"ref": y}, **{"in": [x]})
    b.out(out)


def _custom_param(s, pr, mode) -> list:
    """The parameters, the first one sometimes through a function with a derivative rule
    of its own (``custom_vjp`` for reverse-mode derivatives, ``custom_jvp`` for any;
    not under second derivatives, where JAX differentiates the rules themselves)."""
    if mode in ("hessian", "grad2", "lt") or s.rng.random() < 0.7:
        return list(pr)
    kinds = ["cjvp"] if mode in ("jvp", "linearize", "jacfwd") else ["cvjp", "cjvp"]
    t = s.types[pr[0]]
    c = s.op(Ty(dict(t.names), t.shape), op="custom", f=s.rng.choice(kinds), **{"in": [pr[0]]})
    return [c] + list(pr[1:])


def cat_grad(b):
    rng = b.rng
    p = rng.choice([(), (3,), (2,)])
    nparams = rng.choice([1, 1, 2])
    params = [b.input(b.some_names(0.4), rng.choice([p, ()])) for _ in range(nparams)]
    closure = [b.input(b.some_names(0.7, at_least=1), p) for _ in range(rng.choice([0, 1, 1, 2]))]
    mode = rng.choice(["grad", "grad", "vg", "vjp", "jvp"])
    base = len(b.types)
    s = _sub(b, b.axes, b.types + [b.types[q] for q in params])
    pr = list(range(base, base + nparams))
    vals = _custom_param(s, pr, mode) + closure
    y = s.chain(vals, rng.randint(1, 3))
    if not any(o.get("op") == "bin" and any(i in pr for i in o["in"]) for o in s.ops) and closure:
        y = s.bin(pr[0], closure[0], "mul")
    ty = s.types[y]
    if mode != "vjp":
        y = s.to_scalar(y)
    ty = s.types[y]
    # reduce_axes=(n,) is JAX's psum of the gradient over n: the old reduce_axes meaning
    # only for an axis the loss carries (per instance) and no parameter carries
    reducible = [n for n in ty.names if not any(n in b.types[q].names for q in params)]
    if mode != "jvp" and ty.names and rng.random() < 0.6:
        y = s.coll(y, rng.choice(["psum", "pmean"]), rng.choice(list(ty.names)))
    elif mode != "jvp" and rng.random() < 0.3:
        n = rng.choice(list(b.axes))
        y = s.coll(y, "psum", n)
    ty = s.types[y]
    red = [rng.choice(reducible)] if mode in ("grad", "vg", "vjp") and reducible \
        and rng.random() < 0.4 else []
    if mode == "jvp":
        types = [Ty(dict(ty.names), ty.shape), Ty(None, ty.shape)]
    else:
        types = ([Ty(dict(ty.names), ty.shape)] if mode != "grad" else []) + \
                [Ty(None, b.types[q].shape) for q in params]
    first = b.op(types, op="grad", mode=mode, ret=y, reduce=red, body=s.ops, nout=len(types),
                 **{"in": params})
    for j in range(len(types)):
        b.out(first + j)


XFORMS = ["remat", "linearize", "jacrev", "jacfwd", "hessian", "grad2", "lt"]


def cat_transform(b):
    """The rest of SPEC §4's derivative family inside the xmap, against JAX 0.4.30's own:
    ``grad(checkpoint(f))``, ``linearize``, ``jacrev``/``jacfwd`` of a scalar loss,
    ``hessian`` and grad-of-grad of one parameter, ``linear_transpose`` of a linear body."""
    rng = b.rng
    mode = rng.choice(XFORMS)
    p = rng.choice([(), (2,), (3,)] if mode not in ("hessian", "grad2") else [(), (2,)])
    nparams = 1 if mode in ("hessian", "grad2") else rng.choice([1, 1, 2])
    params = [b.input(b.some_names(0.4), rng.choice([p, ()])) for _ in range(nparams)]
    closure = [b.input(b.some_names(0.7, at_least=1), p) for _ in range(rng.choice([1, 1, 2]))]
    base = len(b.types)
    s = _sub(b, b.axes, b.types + [b.types[q] for q in params])
    pr = list(range(base, base + nparams))
    if mode == "lt":   # linear in the parameters: products with closed-over values, sums
        y = s.bin(pr[0], closure[0], "mul")
        if nparams > 1:
            y = s.bin(y, s.scale(pr[1]), rng.choice(["add", "sub"]))
        if rng.random() < 0.5:
            y = s.scale(y)
    else:
        y = s.chain(_custom_param(s, pr, mode) + closure, rng.randint(1, 3))
        if not any(o.get("op") == "bin" and any(i in pr for i in o["in"]) for o in s.ops):
            y = s.bin(pr[0], closure[0], "mul")
    if mode not in ("linearize", "lt"):
        y = s.to_scalar(y)
    ty = s.types[y]
    # no collective for jvp-based modes (JAX's per-instance Jacobian view differs there by
    # design, SPEC §4) nor under checkpoint (JAX 0.4.30's remat loses the axis names)
    if mode in ("jacrev", "hessian", "grad2", "lt") and ty.names and rng.random() < 0.5:
        y = s.coll(y, rng.choice(["psum", "pmean"]), rng.choice(list(ty.names)))
    ty = s.types[y]
    reducible = [n for n in ty.names if not any(n in b.types[q].names for q in params)]
    red = [rng.choice(reducible)] if mode in ("remat", "lt") and reducible \
        and rng.random() < 0.4 else []
    pshape = [b.types[q].shape for q in params]
    if mode == "linearize":
        types = [Ty(dict(ty.names), ty.shape), Ty(None, ty.shape)]
    elif mode == "hessian":
        types = [Ty(None, pshape[0] + pshape[0])]
    else:
        types = [Ty(None, sh) for sh in pshape]
    first = b.op(types, op="xform", mode=mode, ret=y, reduce=red, body=s.ops, nout=len(types),
                 **{"in": params})
    for j in range(len(types)):
        b.out(first + j)


def cat_spec(b):
    """Spelling-heavy: several inputs, some returned as they are."""
    rng = b.rng
    b.prefix = rng.choice(["single", "dict", "nested", "list", "tuple"])
    p = _shape(b)
    shared = b.some_names(at_least=1)
    xs = [b.input(shared if b.prefix == "single" else b.some_names(at_least=1), p)
          for _ in range(rng.randint(2, 3))]
    for x in xs:
        if rng.random() < 0.5:
            b.out(x)
    b.out(b.chain(xs, 1))


# -- programs JAX rejects -----------------------------------------------------------------

def reject_size(b):
    n = next(iter(b.axes))
    x = b.input([n], _shape(b))
    y = b.input([n], ())
    b.out(b.bin(x, y, "add"))
    b.expect = "reject"
    return {"clash": (1, n)}


def reject_unbound(b):
    rng = b.rng
    x = b.input(b.some_names(at_least=1), rng.choice([(), (3,)]))
    r = rng.random()
    if r < 0.4:
        y = b.op(Ty(dict(b.types[x].names), b.types[x].shape), op="coll", f="psum", axes="zz",
                 **{"in": [x]})
    elif r < 0.7:
        y = b.op(Ty({}, ()), op="axis_index", axes="zz")
    else:
        y = b.op(Ty(dict(b.types[x].names), b.types[x].shape), op="reduce", f="sum",
                 axes=["zz"], style="method", **{"in": [x]})
    b.out(y)
    b.expect = "reject"


def reject_unplaced(b):
    x = b.input(b.some_names(at_least=1), _shape(b))
    b.out(b.chain([x], 1), unplace=True)
    b.expect = "reject"


def reject_rank(b):
    x = b.input(b.some_names(at_least=1), b.rng.choice([(), (3,)]))
    b.out(b.un(x))
    b.expect = "reject"
    return {"bad_rank": 0}


def reject_axis_sizes(b):
    x = b.input(b.some_names(at_least=1), ())
    b.out(b.un(x))
    b.expect = "reject"
    return {"bad_sizes": next(iter(b.types[x].names))}


WEIGHTS = {cat_elementwise: 8, cat_int: 5, cat_reduce: 8, cat_preduce: 10, cat_movement: 14,
           cat_einsum: 7, cat_one_hot: 5, cat_nested: 6, cat_vmap: 6, cat_grad: 14, cat_transform: 8, cat_spec: 8,
           reject_size: 2, reject_unbound: 2, reject_unplaced: 2, reject_rank: 2,
           reject_axis_sizes: 1}
# nx.lax slicing and control flow (lax_programs.py): a share of the programs, drawn with a
# random stream of their own, so every other program of a corpus is what it was before
# they came (the ids in known.py and in reports stay reproducible)
LAX_SHARE = 0.2
LAX_WEIGHTS = {cat_lax_slice: 7, cat_lax_shape: 3, cat_lax_loop: 9, cat_lax_grad: 7}


def one(seed: int, k: int) -> dict:
    rng = random.Random(seed * 1_000_003 + k)
    lax_rng = random.Random(f"lax/{seed}/{k}")
    if lax_rng.random() < LAX_SHARE:
        cats, weights = zip(*LAX_WEIGHTS.items())
        cat, rng = lax_rng.choices(cats, weights)[0], lax_rng
    else:
        cats, weights = zip(*WEIGHTS.items())
        cat = rng.choices(cats, weights)[0]
    b = Builder(rng, _axes(rng))
    extra = cat(b) or {}
    return finish(b, f"p{seed}_{k:05d}", cat.__name__, **extra)


def generate(n: int, seed: int = 0) -> list:
    return PINNED + [one(seed, k) for k in range(n - len(PINNED))]


def _pinned() -> list:
    """SPEC §4's measured examples, spelled in the DSL."""
    x3 = {"shape": [3], "dtype": "float32", "seed": 1}
    lin = {"map": "list", "items": ["i", "..."]}
    p1 = {"id": "pin_psum_grad", "cat": "pinned", "arrays": [x3], "args": {"tuple": [{"arr": 0}]},
          "in_axes": {"tuple": [lin]}, "out_axes": lin, "axis_sizes": None,
          "body": [{"op": "grad", "mode": "grad", "ret": 2, "reduce": [], "in": [0], "nout": 1,
                    "body": [{"op": "coll", "f": "psum", "axes": "i", "in": [1]}]}],
          "out": {"ref": 1}, "axes": {"i": 3}, "expect": "ok",
          "resources": [{"i": ["loop", 3]}, {"i": "x"}]}
    xb = {"shape": [2, 2], "dtype": "float32", "seed": 2}
    w = {"shape": [2], "dtype": "float32", "seed": 3}
    lb = {"map": "list", "items": ["b", "..."]}
    p2 = {"id": "pin_pmean_closure", "cat": "pinned", "arrays": [xb, w],
          "args": {"tuple": [{"arr": 0}, {"arr": 1}]},
          "in_axes": {"tuple": [lb, {"map": "list", "items": ["..."]}]}, "out_axes": lb,
          "axis_sizes": None,
          "body": [{"op": "grad", "mode": "grad", "ret": 5, "reduce": [], "in": [1], "nout": 1,
                    "body": [{"op": "bin", "f": "mul", "in": [0, 2]},
                             {"op": "reduce", "f": "sum", "axes": [0], "style": "method", "in": [3]},
                             {"op": "coll", "f": "pmean", "axes": "b", "in": [4]}]}],
          "out": {"ref": 2}, "axes": {"b": 2}, "expect": "ok",
          "resources": [{"b": ["loop", 2]}, {"b": "x"}]}
    p3 = {"id": "pin_square_nob", "cat": "pinned", "arrays": [xb, w],
          "args": {"tuple": [{"arr": 0}, {"arr": 1}]},
          "in_axes": {"tuple": [lb, {"map": "list", "items": ["..."]}]},
          "out_axes": {"tuple": [{"map": "list", "items": ["..."]}, lb]}, "axis_sizes": None,
          "body": [{"op": "grad", "mode": "grad", "ret": 4, "reduce": [], "in": [1], "nout": 1,
                    "body": [{"op": "un", "f": "square", "in": [2]},
                             {"op": "reduce", "f": "sum", "axes": [0], "style": "method", "in": [3]}]},
                   {"op": "un", "f": "neg", "in": [0]}],
          "out": {"tuple": [{"ref": 2}, {"ref": 3}]}, "axes": {"b": 2}, "expect": "ok",
          "resources": [{"b": ["loop", 2]}, {"b": "x"}]}
    return [p1, p2, p3]


PINNED = _pinned()
