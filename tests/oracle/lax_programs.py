"""Oracle categories for ``nx.lax``'s slicing and control flow (``jax.lax`` in JAX 0.4.30).

The DSL ops are :class:`dsl.LaxOps`; ``programs.LAX_WEIGHTS`` draws these categories
(for ``programs.LAX_SHARE`` of the programs):

- :func:`cat_lax_slice`: ``dynamic_slice`` / ``_in_dim`` / ``dynamic_index_in_dim`` and the
  ``dynamic_update_*`` family, with static starts out of range and negative (a negative
  start wraps once, then starts clamp), per-instance starts (``axis_index`` arithmetic,
  named integer inputs, a named 1-d array of starts), then ``squeeze``/``expand_dims``;
- :func:`cat_lax_shape`: ``squeeze``, ``expand_dims``, ``select`` (names broadcast),
  ``stop_gradient``, and the shape errors both sides must refuse;
- :func:`cat_lax_loop`: ``fori_loop`` (Python or per-instance bounds; the index as a
  start), ``scan`` (forward, reverse, ``length`` only), ``while_loop`` (an int or
  per-instance limit), ``cond`` (a Python, concrete or per-instance predicate); carries
  that gain a named axis from a closed-over value (JAX 0.4.30 batches them: both sides
  accept), collectives on the carry (``ppermute`` rings, ``psum``), and carries or
  branches whose positional shape or dtype changes (both sides refuse);
- :func:`cat_lax_grad`: ``grad`` / ``value_and_grad`` / ``vjp`` / ``jvp`` through all of it.

Integer carries: ``nx.lax.axis_index`` (torch's index dtype) and ``psum`` of integers
(``torch.sum``'s rule) are int64 where JAX's are int32 (no x64), so an int32 carry
meeting them becomes int64 and the loop refuses the dtype change, while JAX runs it
(``known.int_carry_widened_to_int64``).  A per-instance trip count (an int64 loop
index) is therefore only drawn for float carries; a ``psum`` on an int carry is drawn
and reported by that known class.
"""
from __future__ import annotations

from generator import Builder, Ty, union

FSHAPES = [(4,), (5,), (3,), (2, 3), (3, 4)]


def _sub(b, params):
    """A sub-body builder seeing ``b``'s values then ``params`` (closure convention)."""
    s = Builder(b.rng, b.axes)
    s.types = list(b.types) + list(params)
    return s


def _index_pool(b, k=None) -> list:
    """Named (or plain) int32 0-d inputs, some out of range or negative: per-instance starts."""
    rng = b.rng
    k = rng.choice([0, 1, 1, 2]) if k is None else k
    return [b.input(b.some_names(0.5), (), kind="i", rng_range=[-8, 9]) for _ in range(k)]


def _ai(s):
    """``axis_index(n) * a + c`` (a per-instance start)."""
    rng = s.rng
    n = rng.choice(list(s.axes))
    i = s.op(Ty({n: s.axes[n]}, (), "i"), op="axis_index", axes=n)
    return s.op(Ty({n: s.axes[n]}, (), "i"), op="affine", a=rng.choice([1, 1, 2, 3, -1, -2]),
                b=rng.randint(-4, 4), **{"in": [i]})


def _start(s, n, pool, extra=()):
    """One start for a dim of size ``n``: ``(spec, ref)`` -- a static int (spec, ref None)
    or ``(None, ref)`` for a traced one."""
    rng = s.rng
    r = rng.random()
    if r < 0.35:
        return rng.randint(-n - 3, n + 3), None
    if r < 0.65:
        return None, _ai(s)
    if pool and r < 0.85:
        ref = rng.choice(pool)
        if rng.random() < 0.3:
            t = s.types[ref]
            ref = s.op(Ty(dict(t.names), (), "i"), op="affine", a=rng.choice([1, 2, -1]),
                       b=rng.randint(-3, 3), **{"in": [ref]})
        return None, ref
    if extra:
        return None, rng.choice(extra)
    return rng.randint(-n - 3, n + 3), None


def _size(rng, n):
    return rng.choice([0] + list(range(1, n + 1)) * 3) if n else 0


def dslice(s, x, pool, extra=(), arr=None):
    """A random op of the dynamic_slice family on ``x`` (positional rank >= 1)."""
    rng = s.rng
    t = s.types[x]
    p = len(t.shape)
    f = rng.choice(["dynamic_slice", "dynamic_slice", "dynamic_slice_in_dim",
                    "dynamic_index_in_dim"])
    if f == "dynamic_slice":
        sizes = [_size(rng, n) for n in t.shape]
        if arr is not None and len(s.types[arr].shape) == 1 and s.types[arr].shape[0] == p:
            return s.op(Ty(union(t, s.types[arr]), tuple(sizes), t.kind), op="dslice", f=f,
                        arr=True, sizes=sizes, **{"in": [x, arr]})
        spec, refs = zip(*[_start(s, n, pool, extra) for n in t.shape])
        refs = [r for r in refs if r is not None]
        return s.op(Ty(union(t, *[s.types[r] for r in refs]), tuple(sizes), t.kind), op="dslice",
                    f=f, starts=list(spec), sizes=sizes, **{"in": [x] + refs})
    axis = rng.randrange(-p, p)
    spec, ref = _start(s, t.shape[axis], pool, extra)
    names = union(t, s.types[ref]) if ref is not None else dict(t.names)
    shape = list(t.shape)
    kw = {"f": f, "start": spec, "axis": axis}
    if f == "dynamic_slice_in_dim":
        kw["size"] = shape[axis] = _size(rng, t.shape[axis])
    else:
        kw["keepdims"] = rng.random() < 0.5
        if kw["keepdims"]:
            shape[axis] = 1
        else:
            del shape[axis]
    return s.op(Ty(names, tuple(shape), t.kind), op="dslice",
                **{"in": [x] + ([ref] if ref is not None else [])}, **kw)


def update_shape(rng, f, shape, axis):
    """An update's positional shape for ``f`` on an operand of ``shape``."""
    if f == "dynamic_update_slice":
        return tuple(_size(rng, n) for n in shape)
    out = list(shape)
    if f == "dynamic_update_slice_in_dim":
        out[axis] = _size(rng, shape[axis])
    elif rng.random() < 0.5:
        del out[axis]
    else:
        out[axis] = 1
    return tuple(out)


def dupdate(s, f, x, u, axis, pool, extra=(), arr=None):
    """``f`` (the dynamic_update family) writing ``u`` into ``x``."""
    t, tu = s.types[x], s.types[u]
    names = union(t, tu)
    if f == "dynamic_update_slice":
        if arr is not None and s.types[arr].shape == (len(t.shape),):
            return s.op(Ty(union(t, tu, s.types[arr]), t.shape, t.kind), op="dupdate", f=f,
                        arr=True, **{"in": [x, u, arr]})
        spec, refs = zip(*[_start(s, n, pool, extra) for n in t.shape])
        refs = [r for r in refs if r is not None]
        return s.op(Ty(union(t, tu, *[s.types[r] for r in refs]), t.shape, t.kind), op="dupdate",
                    f=f, starts=list(spec), **{"in": [x, u] + refs})
    spec, ref = _start(s, t.shape[axis], pool, extra)
    if ref is not None:
        names = union(t, tu, s.types[ref])
    return s.op(Ty(names, t.shape, t.kind), op="dupdate", f=f, start=spec, axis=axis,
                **{"in": [x, u] + ([ref] if ref is not None else [])})


def squeeze(s, x):
    t = s.types[x]
    r = len(t.shape)
    sel = [d for d, n in enumerate(t.shape) if n == 1 and s.rng.random() < 0.7]
    shape = tuple(n for d, n in enumerate(t.shape) if d not in sel)
    dims = [d - r if s.rng.random() < 0.4 else d for d in sel]
    return s.op(Ty(dict(t.names), shape, t.kind), op="squeeze", dims=dims, **{"in": [x]})


def expand_dims(s, x):
    t = s.types[x]
    k = s.rng.choice([1, 1, 2])
    r = len(t.shape) + k
    dims = s.rng.sample(range(r), k)
    shape = list(t.shape)
    for d in sorted(dims):
        shape.insert(d, 1)
    dims = [d - r if s.rng.random() < 0.4 else d for d in dims]
    return s.op(Ty(dict(t.names), tuple(shape), t.kind), op="expand_dims", dims=dims,
                **{"in": [x]})


def _pred(s, shape, float_refs):
    """A boolean value of positional ``shape`` (``()``: a predicate), from a comparison."""
    rng = s.rng
    cands = [r for r in float_refs if s.types[r].shape == shape and s.types[r].kind == "f"]
    if shape == () and (not cands or rng.random() < 0.4):
        a = _ai(s)
        return s.op(Ty(dict(s.types[a].names), (), "b"), op="cmp", f="gt", c=rng.randint(-1, 2),
                    **{"in": [a]})
    if not cands:
        return None
    x = rng.choice(cands)
    return s.op(Ty(dict(s.types[x].names), shape, "b"), op="cmp", f=rng.choice(["gt", "lt"]),
                c=rng.choice([0.0, 0.5, -0.5]), **{"in": [x]})


# -- categories -------------------------------------------------------------------------

def cat_lax_slice(b):
    rng = b.rng
    kind = "i" if rng.random() < 0.2 else "f"
    shape = rng.choice(FSHAPES)
    x = b.input(b.some_names(0.5), shape, kind=kind)
    pool = _index_pool(b)
    arr = b.input(b.some_names(0.5), (len(shape),), kind="i", rng_range=[-8, 9]) \
        if rng.random() < 0.2 else None
    if rng.random() < 0.55:
        y = dslice(b, x, pool, arr=arr)
    else:
        f = rng.choice(["dynamic_update_slice", "dynamic_update_slice",
                        "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim"])
        axis = rng.randrange(-len(shape), len(shape))
        u = b.input(b.some_names(0.5), update_shape(rng, f, shape, axis % len(shape)), kind=kind)
        y = dupdate(b, f, x, u, axis, pool, arr=arr)
    r = rng.random()
    if r < 0.25 and b.types[y].shape and 1 in b.types[y].shape:
        y = squeeze(b, y)
    elif r < 0.4:
        y = expand_dims(b, y)
    elif r < 0.6:
        y = b.chain([y, x] if b.types[y].shape == shape else [y], 1)
    b.out(y)
    if rng.random() < 0.2:
        b.out(x)


def cat_lax_shape(b):
    rng = b.rng
    sub = rng.choice(["squeeze", "expand", "select", "select", "stopgrad", "bad"])
    if sub == "squeeze":
        x = b.input(b.some_names(0.5), rng.choice([(1,), (1, 3), (2, 1, 1), (1, 2)]))
        y = squeeze(b, x)
    elif sub == "expand":
        x = b.input(b.some_names(0.5), rng.choice([(), (3,), (2, 3)]))
        y = expand_dims(b, x)
    elif sub == "stopgrad":
        x = b.input(b.some_names(0.5), rng.choice([(), (3,)]))
        y = b.un(b.op(Ty(dict(b.types[x].names), b.types[x].shape), op="stopgrad",
                      **{"in": [x]}))
    elif sub == "select":
        shape = rng.choice([(), (3,), (2, 3)])
        kind = "i" if rng.random() < 0.2 else "f"
        t = b.input(b.some_names(0.5), shape, kind=kind)
        f = b.input(b.some_names(0.5), shape, kind=kind)
        c = b.input(b.some_names(0.5), rng.choice([shape, ()]))
        p = _pred(b, b.types[c].shape, [c])
        tt, tf, tp = b.types[t], b.types[f], b.types[p]
        y = b.op(Ty(union(tt, tf, tp), shape, kind), op="select", **{"in": [p, t, f]})
    else:   # both sides refuse: squeeze a dim that is not 1, select's shapes, update rank
        b.expect = "reject"
        x = b.input(b.some_names(0.5), (2, 3))
        r = rng.random()
        if r < 0.3:
            y = b.op(Ty(dict(b.types[x].names), (3,)), op="squeeze", dims=[0], **{"in": [x]})
        elif r < 0.6:
            f = b.input(b.some_names(0.5), (3,))
            p = _pred(b, (), [])
            y = b.op(Ty({}, (2, 3)), op="select", **{"in": [p, x, f]})
        elif r < 0.8:
            u = b.input(b.some_names(0.5), (3,))
            y = b.op(Ty({}, (2, 3)), op="dupdate", f="dynamic_update_slice", starts=[0],
                     **{"in": [x, u]})
        else:
            y = b.op(Ty({}, (2, 3)), op="dslice", f="dynamic_slice", starts=[0, 0],
                     sizes=[3, 1], **{"in": [x]})
    b.out(y)


def _compatible(s, refs, t):
    """Values a carry of type ``t`` may be combined with, keeping its shape and dtype."""
    return [r for r in refs if s.types[r].shape in ((), t.shape)
            and (t.kind == "f" or s.types[r].kind == "i")]


def _mix(s, c, others, n):
    """``n`` elementwise steps from ``c`` with ``others`` (no squaring: loops iterate it,
    and float32 rounding would grow past the comparison's tolerance)."""
    rng = s.rng
    t = s.types[c]
    y = c
    for _ in range(n):
        if others and rng.random() < 0.6:
            y = s.bin(y, rng.choice(others), rng.choice(["add", "sub", "mul", "maximum"]))
        elif rng.random() < 0.6:
            y = s.op(Ty(dict(s.types[y].names), s.types[y].shape, t.kind), op="un",
                     f=rng.choice(["sin", "tanh", "neg", "abs"] if t.kind == "f" else
                                  ["neg", "abs"]), **{"in": [y]})
        else:
            y = s.op(Ty(dict(s.types[y].names), s.types[y].shape, t.kind), op="scale",
                     c=rng.choice([0.5, -1.5] if t.kind == "f" else [2, -1]), **{"in": [y]})
    return y


def _step(s, c, closures, extra, idx_float):
    """A new value for the carry ``c``: same positional shape and dtype."""
    rng = s.rng
    t = s.types[c]
    r = rng.random()
    if r < 0.3 and t.shape and t.kind == "f":
        # c.at[i].set(f(c[i])): the loop index as a start, read then written
        start = rng.choice(extra) if extra and rng.random() < 0.7 else None
        keep = rng.random() < 0.5
        spec = None if start is not None else rng.randint(-t.shape[0] - 2, t.shape[0] + 2)
        ins = [c] + ([start] if start is not None else [])
        shape = (1,) + t.shape[1:] if keep else t.shape[1:]
        g = s.op(Ty(union(*[s.types[i] for i in ins]), shape), op="dslice",
                 f="dynamic_index_in_dim", start=spec, axis=0, keepdims=keep, **{"in": ins})
        g = _mix(s, g, [k for k in closures if s.types[k].shape in ((), shape)], 1)
        return s.op(Ty(union(t, s.types[g], *[s.types[i] for i in ins[1:]]), t.shape),
                    op="dupdate", f="dynamic_update_index_in_dim", start=spec, axis=0,
                    **{"in": [c, g] + ins[1:]})
    if r < 0.45 and t.names:
        n = rng.choice(list(t.names))
        sz = t.names[n]
        if rng.random() < 0.6:   # a ring
            y = s.op(Ty(dict(t.names), t.shape, t.kind), op="ppermute", axes=n,
                     perm=[[k, (k + 1) % sz] for k in range(sz)], **{"in": [c]})
            k = 0.5
        else:
            y = s.coll(c, "psum", n)
            k = 0.25
        if t.kind == "f":   # kept small: a loop compounds it (cos(out) of a large out,
            # the vjp's cotangent, would turn float32 rounding into noise)
            y = s.op(Ty(dict(s.types[y].names), t.shape), op="scale", c=rng.choice([k, -k]),
                     **{"in": [y]})
        return s.bin(y, c, "add")
    y = _mix(s, c, [k for k in closures if rng.random() < 0.7], rng.randint(1, 2))
    if idx_float and extra and t.kind == "f" and rng.random() < 0.5:
        y = s.bin(y, rng.choice(extra), rng.choice(["add", "mul"]))
    return y


def _spoil(s, y):
    """A carry/branch value whose positional shape or dtype differs (both sides refuse)."""
    t = s.types[y]
    r = s.rng.random()
    if t.kind == "i" and r < 0.5:     # int32 -> float32
        return s.op(Ty(dict(t.names), t.shape, "f"), op="cast", **{"in": [y]})
    if t.kind == "f" and t.shape and r < 0.3:
        return s.to_scalar(y)
    return expand_dims(s, y)


def _carry_types(s, init, outs, sub):
    """The carry after the loop: positional type of ``init``, names of both (superset)."""
    names = union(*[s.types[r] for r in init], *[sub.types[r] for r in outs])
    return [Ty(dict(names), s.types[r].shape, s.types[r].kind) for r in init]


def _loop_steps(s, init, closures, counter, bad, per):
    """A loop body stepping each carry of ``init`` with the loop counter (type
    ``counter``) at hand: ``(body ops, outputs, carry types after the loop)``."""
    base = len(s.types)
    sub = _sub(s, [counter] + [s.types[r] for r in init])
    c_ref, crefs = base, list(range(base + 1, base + 1 + len(init)))
    outs = [_step(sub, c, _compatible(sub, closures, sub.types[c]), [c_ref],
                  idx_float=True) for c in crefs]
    if bad:
        outs[-1] = _spoil(sub, outs[-1])
    types = _carry_types(s, init, outs, sub)
    if per:
        for t in types:
            t.names.update(counter.names)
    return sub.ops, outs, types


def fori(s, init, closures, pool, bad=False):
    rng = s.rng
    lo = rng.randint(0, 2)
    per = rng.random() < 0.25 and all(s.types[r].kind == "f" for r in init)
    tup = len(init) > 1 or rng.random() < 0.3
    ins = list(init)
    if per:
        hi_ref = _ai(s)
        ins = [hi_ref] + ins
        hi = None
        itype = Ty(dict(s.types[hi_ref].names), (), "i")
    else:
        hi = rng.randint(lo - 1, lo + 3)
        itype = Ty({}, (), "i")
    body, outs, types = _loop_steps(s, init, closures, itype, bad, per)
    return s.op(types, op="fori", lo=lo, hi=hi, tuple=tup, body=body, out=outs,
                nout=len(init), **{"in": ins})


def scan(s, init, closures, pool, xs_shape, xs_ref, bad=False):
    rng = s.rng
    tup = len(init) > 1 or rng.random() < 0.3
    xs_none = xs_ref is None
    xt = Ty({}, ()) if xs_none else Ty(dict(s.types[xs_ref].names), xs_shape[1:],
                                       s.types[xs_ref].kind)
    base = len(s.types)
    sub = _sub(s, [s.types[r] for r in init] + [xt])
    crefs, x_ref = list(range(base, base + len(init))), base + len(init)
    xs_use = [] if xs_none else [x_ref]
    outs = [_step(sub, c, _compatible(sub, closures + xs_use, sub.types[c]), [],
                  idx_float=False) for c in crefs]
    if bad:
        outs[-1] = _spoil(sub, outs[-1])
    y = _mix(sub, outs[0], _compatible(sub, xs_use, sub.types[outs[0]]), rng.randint(0, 1)) \
        if rng.random() < 0.7 else (x_ref if not xs_none else crefs[0])
    ty = sub.types[y]
    length = xs_shape[0]
    types = _carry_types(s, init, outs, sub)
    ynames = union(ty, *[t for t in types]) if y not in xs_use else dict(ty.names)
    types.append(Ty(ynames, (length,) + ty.shape, ty.kind))
    kw = {"length": length} if xs_none else {}
    return s.op(types, op="scan", ncarry=len(init), tuple=tup, xs_none=xs_none,
                reverse=rng.random() < 0.4, body=sub.ops, out=outs, y=y, nout=len(types),
                **kw, **{"in": list(init) + ([] if xs_none else [xs_ref])})


def while_(s, init, closures, pool, bad=False):
    rng = s.rng
    per = rng.random() < 0.4 and all(s.types[r].kind == "f" for r in init)
    ins = list(init)
    ktype = Ty({}, (), "i")
    if per:
        lim = rng.choice(pool) if pool and rng.random() < 0.4 else _ai(s)
        ins = [lim] + ins
        ktype = Ty(dict(s.types[lim].names), (), "i")
    body, outs, types = _loop_steps(s, init, closures, ktype, bad, per)
    return s.op(types, op="while", limit=None if per else rng.randint(-1, 3), body=body,
                out=outs, nout=len(init), **{"in": ins})


def cond(s, operands, closures, bad=False):
    rng = s.rng
    r = rng.random()
    ins = list(operands)
    if r < 0.25:
        pred = rng.random() < 0.5
        pnames = {}
    else:
        fl = [c for c in closures + operands if s.types[c].kind == "f" and not s.types[c].shape]
        if r < 0.45 and fl:       # a 0-d float compared: concrete (or named) per instance
            x = rng.choice(fl)
            p = s.op(Ty(dict(s.types[x].names), (), "b"), op="cmp", f="gt", c=0.0,
                     **{"in": [x]})
        else:
            p = _pred(s, (), [])
        pred, pnames = None, dict(s.types[p].names)
        ins = [p] + ins
    base = len(s.types)
    t0 = s.types[operands[0]]

    def branch(spoil):
        sub = _sub(s, [s.types[r] for r in operands])
        ps = list(range(base, base + len(operands)))
        y = _step(sub, ps[0], _compatible(sub, closures + ps[1:], t0), [], idx_float=False)
        if spoil:
            y = _spoil(sub, y)
        return sub, y
    ts, ty = branch(False)
    fs, fy = branch(bad)
    t = Ty(union(ts.types[ty], fs.types[fy], Ty(pnames, ())), t0.shape, t0.kind)
    return s.op(t, op="cond", pred=pred, t_body=ts.ops, t_out=ty, f_body=fs.ops, f_out=fy,
                **{"in": ins})


def cat_lax_loop(b):
    rng = b.rng
    which = rng.choice(["fori", "fori", "scan", "scan", "while", "cond", "cond"])
    bad = rng.random() < 0.08
    if bad:
        b.expect = "reject"
    kind = "i" if rng.random() < 0.15 else "f"
    shape = rng.choice([(), (3,), (4,), (2, 3)])
    init = [b.input(b.some_names(0.4), shape, kind=kind)
            for _ in range(rng.choice([1, 1, 1, 2]))]
    # closed-over values: named ones the carry lacks make it gain the axis (JAX batches)
    closures = [b.input(b.some_names(0.6, at_least=rng.choice([0, 1])),
                        rng.choice([(), shape]), kind=kind)
                for _ in range(rng.choice([0, 1, 1, 2]))]
    pool = _index_pool(b, rng.choice([0, 1]))
    if which == "fori":
        out = fori(b, init, closures, pool, bad)
        n = len(init)
    elif which == "scan":
        length = rng.choice([1, 2, 3])
        xs_shape = (length,) + rng.choice([(), shape])
        xs = None if rng.random() < 0.2 else b.input(b.some_names(0.4), xs_shape, kind=kind)
        out = scan(b, init, closures, pool, xs_shape, xs, bad)
        n = len(init) + 1
    elif which == "while":
        out = while_(b, init, closures, pool, bad)
        n = len(init)
    else:
        out = cond(b, init, closures, bad)
        n = 1
    for j in range(n):
        b.out(out + j)


def cat_lax_grad(b):
    """Derivatives through dynamic slices and updates with per-instance starts, select,
    stop_gradient, cond and the loops, against JAX's."""
    rng = b.rng
    shape = rng.choice([(4,), (5,), (2, 3)])
    p = b.input(b.some_names(0.4), shape)
    closure = b.input(b.some_names(0.6, at_least=1), rng.choice([(), shape]))
    pool = _index_pool(b, rng.choice([0, 1]))
    how = rng.choice(["slice", "slice", "update", "update", "select", "stopgrad", "cond",
                      "fori", "fori", "scan", "while"])
    if how == "update":
        upd = b.input(b.some_names(0.4), update_shape(rng, "dynamic_update_slice", shape, 0))
        canvas = b.input(b.some_names(0.4), shape)
    mode = rng.choice(["grad", "grad", "vg", "vjp", "jvp"])
    base = len(b.types)
    s = _sub(b, [b.types[p]])
    pr = base
    x = s.bin(pr, closure, "mul") if rng.random() < 0.6 else pr
    if how == "slice":
        y = dslice(s, x, pool)
    elif how == "update":
        if rng.random() < 0.5:    # a slice of the parameter written into a closed-over canvas
            u = s.op(Ty(dict(s.types[x].names), s.types[upd].shape), op="dslice",
                     f="dynamic_slice", starts=[rng.randint(-3, 3) for _ in shape],
                     sizes=list(s.types[upd].shape), **{"in": [x]})
            y = dupdate(s, "dynamic_update_slice", canvas, u, 0, pool)
        else:                     # a closed-over update written into the parameter
            y = dupdate(s, "dynamic_update_slice", x, upd, 0, pool)
        if rng.random() < 0.5:
            y = s.un(y)
    elif how == "select":
        c = s.un(pr)
        pred = _pred(s, rng.choice([(), shape]), [closure, x])
        pred = pred if pred is not None else _pred(s, (), [])
        y = s.op(Ty(union(s.types[c], s.types[x], s.types[pred]), shape), op="select",
                 **{"in": [pred, x, c]})
    elif how == "stopgrad":
        sg = s.op(Ty(dict(s.types[x].names), shape), op="stopgrad", **{"in": [x]})
        y = s.bin(s.un(sg), x, "mul")
    elif how == "cond":
        y = cond(s, [x], [closure])
    elif how == "fori":
        y = fori(s, [x], [closure], pool)
    elif how == "scan":
        xs_shape = (shape[0],) + shape[1:]
        y = scan(s, [s.op(Ty(dict(s.types[x].names), shape[1:]), op="dslice",
                          f="dynamic_index_in_dim", start=0, axis=0, keepdims=False,
                          **{"in": [x]})], [], pool, xs_shape, x)
        if rng.random() < 0.5:
            y += 1     # the stacked ys
    else:
        y = while_(s, [x], [closure], pool)
    if any(o["op"] == "while" or o["op"] == "fori" and o["hi"] is None for o in s.ops) \
            and rng.random() < 0.8:
        mode = "jvp"   # JAX differentiates a while_loop in forward mode only
    if s.types[y].kind != "f":
        y = s.bin(y, pr, "mul")
    if mode != "vjp":
        y = s.to_scalar(y)
    ty = s.types[y]
    if mode != "jvp" and ty.names and rng.random() < 0.4:
        y = s.coll(y, rng.choice(["psum", "pmean"]), rng.choice(list(ty.names)))
    ty = s.types[y]
    pt = b.types[p]
    if mode == "jvp":
        types = [Ty(dict(ty.names), ty.shape), Ty(None, ty.shape)]
    else:
        types = ([Ty(dict(ty.names), ty.shape)] if mode != "grad" else []) + \
                [Ty(None, pt.shape)]
    first = b.op(types, op="grad", mode=mode, ret=y, reduce=[], body=s.ops, nout=len(types),
                 **{"in": [p]})
    for j in range(len(types)):
        b.out(first + j)
