"""Random named programs for the oracle, seeded and deterministic (``dsl`` format).

``generate(n, seed)`` gives ``n`` programs; program ``k`` depends only on ``(seed, k)``.
Each program is built by a *category* function (``CATEGORIES``) that declares its
inputs as abstract types (named shape, positional shape, int/float) and appends ops
while tracking the types of the values it makes (``Ty``), so accepted programs are
well-formed by construction; the ``reject_*`` categories break exactly one rule
(a size clash, an unbound name, an output axis ``out_axes`` leaves unplaced, a list
spec without ``...`` of the wrong rank, an ``axis_sizes`` entry that disagrees).
:class:`Builder.finish` then picks the spellings: each input's axis mapping (dict with
possibly negative positions, list/tuple with ``...`` and ``None`` holes, list without
``...``, string), the in_axes prefix form (per-argument tuple or list, one top-level
mapping, dict / nested-tuple arguments), the out_axes forms, and the ``resources``
(``SerialLoop`` chunkings and a one-device mesh) the torch side also runs.

Values whose named shape the generator does not model (gradients, jvp tangents) have
``names=None``; their out_axes place every bound axis (an output lacking an axis that
out_axes places is broadcast, so this is valid whatever the exact named shape is).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

POOL = ("a", "b", "c", "d")
LETTERS = "nmpq"


@dataclass
class Ty:
    names: dict | None          # name -> size (None: not modelled)
    shape: tuple | None         # positional shape (None: not modelled)
    kind: str = "f"             # "f" float32 | "i" int32


def union(*ts: Ty) -> dict:
    out: dict = {}
    for t in ts:
        out.update(t.names)
    return out


def bshape(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b))


@dataclass
class Builder:
    rng: random.Random
    axes: dict                                   # every axis the top-level xmap binds
    inputs: list = field(default_factory=list)   # Ty per input
    input_meta: list = field(default_factory=list)
    types: list = field(default_factory=list)    # Ty per env value
    ops: list = field(default_factory=list)
    outs: list = field(default_factory=list)     # (ref, force_unplaced)
    axis_sizes: dict = field(default_factory=dict)
    expect: str = "ok"
    prefix: str | None = None                    # force an in_axes prefix form

    # -- values --------------------------------------------------------------------
    def input(self, names, shape=(), kind="f", rng_range=None) -> int:
        names = {n: self.axes[n] for n in names}
        self.inputs.append(Ty(names, tuple(shape), kind))
        self.input_meta.append({"range": rng_range})
        self.types.append(self.inputs[-1])
        return len(self.types) - 1

    def op(self, ty, **op) -> int:
        self.ops.append(op)
        if isinstance(ty, list):
            self.types.extend(ty)
            return len(self.types) - len(ty)
        self.types.append(ty)
        return len(self.types) - 1

    def out(self, ref, unplace=False):
        self.outs.append((ref, unplace))

    def some_names(self, p=0.6, at_least=0) -> list:
        names = [n for n in self.axes if n not in self.axis_sizes and self.rng.random() < p]
        pool = [n for n in self.axes if n not in names and n not in self.axis_sizes]
        while len(names) < at_least and pool:
            names.append(pool.pop(self.rng.randrange(len(pool))))
        return names

    # -- ops with typing -------------------------------------------------------------
    def un(self, x):
        t = self.types[x]
        f = self.rng.choice(["neg", "abs", "square"] + (["sin", "tanh"] if t.kind == "f" else []))
        return self.op(Ty(dict(t.names), t.shape, t.kind), op="un", f=f, **{"in": [x]})

    def bin(self, x, y, f=None):
        tx, ty = self.types[x], self.types[y]
        f = f or self.rng.choice(["add", "sub", "mul", "maximum"])
        kind = "f" if "f" in (tx.kind, ty.kind) else "i"
        return self.op(Ty(union(tx, ty), bshape(tx.shape, ty.shape), kind),
                       op="bin", f=f, **{"in": [x, y]})

    def scale(self, x):
        t = self.types[x]
        c = self.rng.choice([2, -1, 3]) if t.kind == "i" else self.rng.choice([0.5, -1.5, 2.0])
        return self.op(Ty(dict(t.names), t.shape, t.kind), op="scale", c=c, **{"in": [x]})

    def chain(self, vals: list, n: int) -> int:
        """``n`` random elementwise ops over ``vals`` (broadcast by name); the last value."""
        vals = list(vals)
        for _ in range(n):
            r = self.rng.random()
            if r < 0.5 and len(vals) > 1:
                a, b = self.rng.sample(vals, 2)
                vals.append(self.bin(a, b))
            elif r < 0.8:
                vals.append(self.un(self.rng.choice(vals)))
            else:
                vals.append(self.scale(self.rng.choice(vals)))
        return vals[-1]

    def reduce(self, x, f, axes, style):
        t = self.types[x]
        names = {n: s for n, s in t.names.items() if n not in axes}
        rank = len(t.shape)
        drop = {a % rank for a in axes if isinstance(a, int)}
        shape = tuple(s for i, s in enumerate(t.shape) if i not in drop)
        return self.op(Ty(names, shape, t.kind), op="reduce", f=f, axes=list(axes),
                       style=style, **{"in": [x]})

    def coll(self, x, f, axes):
        t = self.types[x]
        seq = axes if isinstance(axes, list) else [axes]
        names = {n: s for n, s in t.names.items() if n not in seq}
        rank = len(t.shape)
        drop = {a % rank for a in seq if isinstance(a, int)}
        shape = tuple(s for i, s in enumerate(t.shape) if i not in drop)
        return self.op(Ty(names, shape, t.kind), op="coll", f=f, axes=axes, **{"in": [x]})

    def to_scalar(self, x):
        """Sum away every positional axis (a loss)."""
        t = self.types[x]
        if not t.shape:
            return x
        axes = list(range(len(t.shape)))
        if self.rng.random() < 0.5:
            axes = [a - len(t.shape) for a in axes]
        return self.reduce(x, "sum", axes, self.rng.choice(["method", "nx", "torch"]))

    def bound_names(self) -> list:
        return list(self.axes)


# -- in_axes / out_axes spellings ------------------------------------------------------

def mapping_for(rng, named_pos: dict, rank: int, *, allow_full=True) -> dict:
    """A tagged mapping placing ``named_pos`` (pos -> name) on a value of rank ``rank``."""
    names_sorted = [named_pos[p] for p in sorted(named_pos)]
    leading = sorted(named_pos) == list(range(len(named_pos)))
    forms = ["dict", "dict"]
    maxp = max(named_pos) + 1 if named_pos else 0
    forms += ["list_holes", "tuple_holes"]
    if leading:
        forms += ["list", "tuple", "str"]
    if allow_full and rank is not None and (rank == maxp):
        forms += ["full", "full"]
    form = rng.choice(forms)
    if form == "dict":
        items = []
        for p, n in named_pos.items():
            if rank is not None and rng.random() < 0.4:
                p = p - rank
            items.append([p, n])
        rng.shuffle(items)
        return {"map": "dict", "items": items, "rank": rank}
    if form in ("list", "tuple"):
        return {"map": form, "items": names_sorted + ["..."]}
    if form == "str":
        if not names_sorted:
            return {"map": "str", "s": "..."}
        return {"map": "str", "s": " ".join(names_sorted) + rng.choice([" ...", ""])}
    items = [named_pos.get(i) for i in range(maxp)]
    if form == "full":
        return {"map": rng.choice(["list", "tuple"]), "items": items}
    return {"map": "list" if form == "list_holes" else "tuple", "items": items + ["..."]}


def place(rng, names: list, rank: int) -> dict:
    """Random positions (pos -> name) for ``names`` among ``rank + len(names)`` axes."""
    total = rank + len(names)
    if rng.random() < 0.45:
        pos = list(range(len(names)))
    else:
        pos = sorted(rng.sample(range(total), len(names)))
    order = list(names)
    rng.shuffle(order)
    return dict(zip(pos, order))


def out_mapping(rng, t: Ty, bound: list, drop: str | None = None) -> dict:
    """A tagged out_axes mapping for a value of type ``t``: places its names (all of
    ``bound`` when they are not modelled) plus, sometimes, bound names it lacks;
    ``drop`` leaves that name unplaced (a program JAX rejects)."""
    if t.names is None:
        names = list(bound)
    else:
        names = list(t.names) + [n for n in bound if n not in t.names and rng.random() < 0.3]
    names = [n for n in names if n != drop]
    if t.shape is None:
        return {"map": rng.choice(["list", "tuple"]), "items": names + ["..."]}
    return mapping_for(rng, place(rng, names, len(t.shape)), len(t.shape) + len(names))


def destr(maps: list) -> list:
    """A container whose entries are all string mappings would read as ONE mapping (a
    list of names: ``['a ...']`` names axis ``'a ...'``); spell those entries as lists."""
    if maps and all(isinstance(m, dict) and m.get("map") == "str" for m in maps):
        return [{"map": "list", "items": m["s"].split() + ([] if "..." in m["s"] else ["..."])}
                for m in maps]
    return maps


def divisors(n: int) -> list:
    return [k for k in range(1, n + 1) if n % k == 0]


def finish(b: Builder, pid: str, cat: str, *, clash=None, bad_rank=None,
           bad_sizes=None) -> dict:
    """Spell the program ``b`` built: arrays, in_axes, out_axes, resources."""
    rng = b.rng
    arrays, maps, layouts = [], [], []
    single = (b.prefix == "single" or (b.prefix is None and rng.random() < 0.15)) and \
        len({(tuple(sorted(t.names)), len(t.shape)) for t in b.inputs}) == 1
    for i, t in enumerate(b.inputs):
        rank = len(t.shape) + len(t.names)
        if single and i > 0:
            named_pos, m = layouts[0], maps[0]
        else:
            named_pos = place(rng, list(t.names), len(t.shape))
            m = mapping_for(rng, named_pos, rank)
        if bad_rank == i:   # a list without ... that names one axis too few
            m = {"map": "list", "items": [named_pos.get(p) for p in range(rank)]}
        layouts.append(named_pos)
        maps.append(m)
        pos = iter(t.shape)
        shape = [t.names[named_pos[p]] if p in named_pos else next(pos) for p in range(rank)]
        if clash is not None and clash[0] == i:
            shape[[p for p, n in named_pos.items() if n == clash[1]][0]] += 1
        if bad_rank == i:
            shape.append(2)
        a = {"shape": shape, "dtype": "float32" if t.kind == "f" else "int32",
             "seed": rng.randrange(2**31)}
        if b.input_meta[i]["range"]:
            a["range"] = b.input_meta[i]["range"]
        arrays.append(a)
    leaves = [{"arr": i} for i in range(len(arrays))]
    form = b.prefix or rng.choice(["tuple"] * 5 + ["list", "dict", "nested"])
    if single:
        args, in_axes = {"tuple": leaves}, maps[0]
    elif form == "list" or len(leaves) < 2:
        args, in_axes = {"tuple": leaves}, {("list" if form == "list" else "tuple"): destr(maps)}
    elif form == "dict":
        maps[:2] = destr(maps[:2])
        d = {"dict": [["w", leaves[0]], ["x", leaves[1]]]}
        dm = {"dict": [["w", maps[0]], ["x", maps[1]]]}
        args, in_axes = {"tuple": [d] + leaves[2:]}, {"tuple": [dm] + maps[2:]}
    else:
        maps[:2] = destr(maps[:2])
        args = {"tuple": [{"tuple": leaves[:2]}] + leaves[2:]}
        in_axes = {"tuple": [{"tuple": maps[:2]}] + maps[2:]}
    bound = list(b.axes)
    outs = []
    for ref, unplace in b.outs:
        t = b.types[ref]
        drop = next(iter(t.names)) if unplace else None
        outs.append(({"ref": ref}, out_mapping(rng, t, bound, drop)))
    outs = list(zip([o for o, _ in outs], destr([m for _, m in outs])))
    r = rng.random()
    if len(outs) == 1 and r < 0.5:
        out, out_axes = outs[0]
    elif r < 0.8 or len(outs) == 1:
        kind = "tuple" if r < 0.7 else "list"
        out, out_axes = {kind: [o for o, _ in outs]}, {kind: [m for _, m in outs]}
    else:
        keys = [f"o{j}" for j in range(len(outs))]
        out = {"dict": [[k, o] for k, (o, _) in zip(keys, outs)]}
        out_axes = {"dict": [[k, m] for k, (_, m) in zip(keys, outs)]}
    carried = {n for t in b.inputs for n in t.names}
    sizes = {n: s for n, s in b.axes.items() if n in b.axis_sizes or n not in carried}
    if bad_sizes:
        sizes[bad_sizes] = b.axes[bad_sizes] + 1
    res = []
    loops = {n: ["loop", rng.choice(divisors(s))] for n, s in b.axes.items()}
    res.append(loops)
    one = rng.choice(bound)
    res.append({one: ["loop", b.axes[one]]})
    mesh_axes = rng.sample(bound, min(2, len(bound)))
    res.append({n: mx for n, mx in zip(mesh_axes, ["x", "y"])})
    return {"id": pid, "cat": cat, "arrays": arrays, "args": args, "in_axes": in_axes,
            "out_axes": out_axes, "axis_sizes": sizes or None, "body": b.ops, "out": out,
            "axes": dict(b.axes), "expect": b.expect, "resources": res}
