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
(``grad``, ``vmap``, ``xmap``) carry a sub-body run by :func:`run_body`; a ``grad``
sub-body sees the enclosing environment (closure) followed by its parameters, a
``vmap``/``xmap`` sub-body only its parameters.  The op vocabulary is listed in
``OPS``; each backend (``jax_runner.JaxBackend``, ``torch_interp.TorchBackend``)
implements one method per op.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

OPS = ("un", "bin", "scale", "reduce", "coll", "pdot", "pshuffle", "ppermute", "all_gather",
       "all_to_all", "psum_scatter", "axis_index", "einsum", "one_hot", "xmap", "vmap", "grad",
       "cast")
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


def build_args(prog: dict, convert: Callable) -> tuple:
    """The positional argument tuple, arrays made by ``convert(np_array)``."""
    arrs = [convert(make_array(a)) for a in prog["arrays"]]
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
