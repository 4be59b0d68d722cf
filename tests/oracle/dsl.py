"""The oracle's program description: plain JSON, read by both interpreters.

This module imports only numpy, so the JAX runner (``.venv-jax``) and the pytest
process (``.venv``) share it.  A *program* is a dict::

    {"id": "p00042", "cat": "collective",          # generator category (for reports)
     "arrays": [{"shape": [2, 3], "dtype": "float32", "seed": 7}, ...],
     "args": <tree of {"arr": k}>,                  # the positional arguments (a tuple)
     "in_axes": <tree of specs>, "out_axes": <tree of specs>,
     "axis_sizes": {"c": 3} | None,
     "body": [op, ...], "out": <tree of {"ref": i}>,
     "axes": {"a": 2, ...},                         # every axis the top-level xmap binds
     "expect": "ok" | "reject"}                     # the generator's intent (informational)

Trees are tagged: ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[key, v], ...]}``;
an axis *mapping* is ``{"map": "dict", "items": [[pos, name], ...]}``,
``{"map": "list"|"tuple", "items": [name | None | "...", ...]}`` or
``{"map": "str", "s": "a b ..."}``; a dict mapping carries ``"rank"``, the rank of the
value it names, because JAX 0.4.30 refuses negative positions (its side counts them
from that rank).  JAX 0.4.30 has no string specs: its side reads a
string as the equivalent list (``'a b ...'`` and ``'a b'`` -> ``['a', 'b', ...]``).

The body is straight-line code: each op reads values by index (``"in": [i, j]``) from an
environment that starts with the flattened array arguments (in ``args`` order) and
appends the op's result (or, for ops with ``"nout"``, its ``nout`` results).  Ops that take a function
(``grad``, ``vmap``, ``xmap``, and the control flow of :class:`LaxOps`) carry a sub-body
run by :func:`run_body`; a ``grad``, ``cond``, ``fori``, ``scan`` or ``while`` sub-body
sees the enclosing environment (closure) followed by its parameters, a
``vmap``/``xmap`` sub-body only its parameters.  The op vocabulary is listed in
``OPS``; each backend (``jax_runner.JaxBackend``, ``torch_interp.TorchBackend``)
implements one method per op; the ``jax.lax`` slicing and control-flow ops are
:class:`LaxOps`, shared, calling the backend's ``lax`` module (``jax.lax`` or
``named_axes.lax``, which have one signature per function).
"""
from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

OPS = ("un", "bin", "scale", "reduce", "coll", "pdot", "pshuffle", "ppermute", "all_gather",
       "all_to_all", "psum_scatter", "axis_index", "einsum", "one_hot", "xmap", "vmap", "grad",
       "cast", "affine", "cmp", "dslice", "dupdate", "squeeze", "expand_dims", "select",
       "stopgrad", "cond", "fori", "scan", "while")
ELL = "..."


def decode_spec(s: Any, *, strings: bool = True) -> Any:
    """A tagged spec tree -> the Python object given to xmap (``strings=False``: JAX's
    reading, string mappings become lists)."""
    if isinstance(s, dict) and "map" in s:
        kind = s["map"]
        if kind == "dict":
            if strings or s.get("rank") is None:
                return {int(p): n for p, n in s["items"]}
            # JAX 0.4.30 refuses negative positions: count them from the rank given
            return {int(p) % s["rank"] if p < 0 else int(p): n for p, n in s["items"]}
        if kind == "str":
            if strings:
                return s["s"]
            words = [Ellipsis if w == ELL else w for w in s["s"].split()]
            return words if Ellipsis in words else words + [Ellipsis]   # '...' is optional
        items = [Ellipsis if it == ELL else it for it in s["items"]]
        return items if kind == "list" else tuple(items)
    return map_tree(s, lambda leaf: leaf, lambda sub: decode_spec(sub, strings=strings))


def map_tree(t: Any, leaf: Callable, sub: Callable | None = None) -> Any:
    """Rebuild a tagged container tree; ``leaf`` gets each non-container node (or
    ``sub`` each child when given, for specs whose leaves are mappings)."""
    rec = sub if sub is not None else (lambda c: map_tree(c, leaf))
    if isinstance(t, dict) and "tuple" in t:
        return tuple(rec(c) for c in t["tuple"])
    if isinstance(t, dict) and "list" in t:
        return [rec(c) for c in t["list"]]
    if isinstance(t, dict) and "dict" in t:
        return {k: rec(c) for k, c in t["dict"]}
    return leaf(t)


def leaves(t: Any) -> list:
    """The leaves of a tagged tree in document order."""
    out: list = []
    map_tree(t, out.append)
    return out


def make_array(a: dict) -> np.ndarray:
    """The deterministic contents of one argument array."""
    rs = np.random.RandomState(a["seed"])
    shape = tuple(a["shape"])
    if a["dtype"].startswith("int"):
        lo, hi = a.get("range", (-3, 4))
        return rs.randint(lo, hi, size=shape).astype(a["dtype"])
    v = rs.uniform(-2.0, 2.0, size=shape)
    v = np.where(np.abs(v) < 0.1, 0.5, v)
    return v.astype(a["dtype"])


def build_args(prog: dict, convert: Callable, fill: float | None = None) -> tuple:
    """The positional argument tuple, arrays made by ``convert(np_array)``; with ``fill``
    every floating array holds that one value instead (the same program on other data)."""
    arrs = [make_array(a) for a in prog["arrays"]]
    if fill is not None:
        arrs = [a if a.dtype.kind in "iub" else np.full_like(a, fill) for a in arrs]
    arrs = [convert(a) for a in arrs]
    return map_tree(prog["args"], lambda lf: arrs[lf["arr"]])


def run_body(body: list, env: list, backend: Any) -> list:
    """Run straight-line ``body`` on ``env`` (extended in place) with ``backend``."""
    for op in body:
        vals = [env[i] for i in op.get("in", ())]
        res = getattr(backend, "op_" + op["op"])(op, vals, env)
        if "nout" in op:      # ops with several results (the grad family) give a tuple
            env.extend(res)
        else:
            env.append(res)
    return env


def outputs(out: Any, env: list) -> Any:
    return map_tree(out, lambda lf: env[lf["ref"]])


def load(path: str) -> list:
    with open(path) as f:
        return json.load(f)


def _starts(spec: list, vals: list) -> list:
    """Start indices: an int entry is static, ``None`` takes the next value of ``vals``."""
    it = iter(vals)
    return [next(it) if s is None else s for s in spec]


class LaxOps:
    """The ``jax.lax`` slicing / control-flow ops of the DSL, on ``self.lax``.

    - ``affine`` (``v * a + b``) and ``cmp`` (``v > c`` / ``v < c``) make index values and
      predicates;
    - ``dslice`` (``f``: ``dynamic_slice`` with ``starts`` and ``sizes`` -- or ``arr``:
      ``in[1]`` is a 1-d array of starts --, ``dynamic_slice_in_dim`` with ``start``,
      ``size``, ``axis``, ``dynamic_index_in_dim`` with ``start``, ``axis``, ``keepdims``);
      ``dupdate`` likewise with ``in[1]`` the update; a start that is ``None`` is the
      next value of ``in`` (a traced, maybe per-instance index), an int a static one;
    - ``squeeze``/``expand_dims`` (``dims``), ``select`` (``in``: pred, on_true,
      on_false), ``stopgrad``;
    - ``cond``: ``pred`` a Python bool, or ``None`` (``in[0]``); the other ``in`` are the
      operands; ``t_body``/``t_out`` and ``f_body``/``f_out`` the branches;
    - ``fori``: ``lo``, ``hi`` (``None``: ``in[0]``), the carry ``in`` (a tuple when
      ``tuple``), ``body`` over ``[i, *carry]``, ``out`` the new carry's refs;
    - ``scan``: carry ``in[:ncarry]``, then ``xs`` (absent when ``xs_none``: ``length``),
      ``body`` over ``[*carry, x]``, ``out`` / ``y`` refs, ``reverse``; results: the carry
      then the stacked ``y``;
    - ``while``: carry ``(k, *in)`` from ``k = 0`` while ``k < limit`` (``limit`` an int
      or ``None``: ``in[0]``), ``body`` over ``[k, *vals]``, ``out`` the new values'
      refs; results: the values.
    """
    lax: Any = None

    def op_affine(self, op, v, env):
        return v[0] * op["a"] + op["b"]

    def op_cmp(self, op, v, env):
        return v[0] > op["c"] if op["f"] == "gt" else v[0] < op["c"]

    def op_dslice(self, op, v, env):
        x, rest, f = v[0], v[1:], op["f"]
        if f == "dynamic_slice":
            st = rest[0] if op.get("arr") else _starts(op["starts"], rest)
            return self.lax.dynamic_slice(x, st, tuple(op["sizes"]))
        s = rest[0] if op["start"] is None else op["start"]
        if f == "dynamic_slice_in_dim":
            return self.lax.dynamic_slice_in_dim(x, s, op["size"], op["axis"])
        return self.lax.dynamic_index_in_dim(x, s, op["axis"], op["keepdims"])

    def op_dupdate(self, op, v, env):
        x, u, rest, f = v[0], v[1], v[2:], op["f"]
        if f == "dynamic_update_slice":
            st = rest[0] if op.get("arr") else _starts(op["starts"], rest)
            return self.lax.dynamic_update_slice(x, u, st)
        s = rest[0] if op["start"] is None else op["start"]
        return getattr(self.lax, f)(x, u, s, op["axis"])

    def op_squeeze(self, op, v, env):
        return self.lax.squeeze(v[0], tuple(op["dims"]))

    def op_expand_dims(self, op, v, env):
        return self.lax.expand_dims(v[0], tuple(op["dims"]))

    def op_select(self, op, v, env):
        return self.lax.select(*v)

    def op_stopgrad(self, op, v, env):
        return self.lax.stop_gradient(v[0])

    def op_cond(self, op, v, env):
        outer = list(env)
        pred, operands = (v[0], v[1:]) if op["pred"] is None else (op["pred"], v)

        def branch(body, out):
            return lambda *a: run_body(body, outer + list(a), self)[out]
        return self.lax.cond(pred, branch(op["t_body"], op["t_out"]),
                             branch(op["f_body"], op["f_out"]), *operands)

    def op_fori(self, op, v, env):
        outer = list(env)
        hi, init = (v[0], v[1:]) if op["hi"] is None else (op["hi"], v)
        tup = op["tuple"]

        def body(i, c):
            e = run_body(op["body"], outer + [i] + (list(c) if tup else [c]), self)
            new = [e[r] for r in op["out"]]
            return tuple(new) if tup else new[0]
        res = self.lax.fori_loop(op["lo"], hi, body, tuple(init) if tup else init[0])
        return tuple(res) if tup else (res,)

    def op_scan(self, op, v, env):
        outer = list(env)
        n, tup = op["ncarry"], op["tuple"]
        init, xs = v[:n], None if op["xs_none"] else v[n]

        def f(c, x):
            e = run_body(op["body"], outer + (list(c) if tup else [c]) + [x], self)
            new = [e[r] for r in op["out"]]
            return (tuple(new) if tup else new[0]), e[op["y"]]
        c, ys = self.lax.scan(f, tuple(init) if tup else init[0], xs, length=op.get("length"),
                              reverse=op["reverse"])
        return (tuple(c) if tup else (c,)) + (ys,)

    def op_while(self, op, v, env):
        outer = list(env)
        lim, vals = (v[0], v[1:]) if op["limit"] is None else (op["limit"], v)

        def body(c):
            e = run_body(op["body"], outer + list(c), self)
            return (c[0] + 1,) + tuple(e[r] for r in op["out"])
        return tuple(self.lax.while_loop(lambda c: c[0] < lim, body, (0,) + tuple(vals))[1:])
