"""Oracle programs on a real mesh: the DTensor (4 gloo ranks) and torch-xla (4 CPU devices)
engines must give what the vectorized run gives, or raise a ``NamedAxisError``.

Used by ``tests/parallel/_oracle_dtensor_worker.py`` (each gloo rank) and
``tests/parallel/test_oracle_xla.py``.  The reference is the vectorized named_axes run
in the same process (it already matches JAX 0.4.30's xmap in ``make test-oracle``), so
no JAX is needed here.

- :func:`sample` picks a seeded subset of the generated corpus (``programs.one``):
  programs with at least one axis a 2-way mesh axis can split (and the ``reject_*``
  programs, which must still be rejected);
- :func:`assignments` spells every sensible ``axis_resources`` of a program on a 2x2
  mesh ``('x', 'y')`` and a 1-d mesh ``('w',)`` of the same 4 devices: one axis on
  ``x``, on ``y``, on ``('x', 'y')``, on ``w``; two axes on ``x`` and ``y``; two axes on
  one mesh axis (a resource conflict unless they never meet); a mesh axis with a
  ``SerialLoop`` on another axis; one axis on ``x`` and a ``SerialLoop(2)`` (JAX's
  ``('x', 'l')``); an axis whose size the mesh axis does not divide
  (must raise);
- :func:`run_on` runs one program under one assignment inside a mesh;
  :func:`judge` compares it with the vectorized run (values, shapes, dtype kind, the
  named shapes seen inside the xmap; or both reject; or a ``NamedAxisError``).

Knobs (for open-ended hunts, see the Makefile's ``fuzz-oracle-mesh``):
``NX_ORACLE_MESH_N`` (programs), ``NX_ORACLE_MESH_SEED`` (corpus seed),
``NX_ORACLE_MESH_PER_PROG`` (assignments per program, 0 = all).
"""
from __future__ import annotations

import json
import os
import random

import torch

import named_axes as nx

import compare
import dsl
import known
import programs
import torch_interp

MESHES = {"xy": (("x", "y"), (2, 2)), "w": (("w",), (4,))}


def knobs(default_n: int, default_per_prog: int) -> tuple:
    """``(n, seed, per_prog)`` from the environment (defaults: the CI sample)."""
    return (int(os.environ.get("NX_ORACLE_MESH_N", default_n)),
            int(os.environ.get("NX_ORACLE_MESH_SEED", "0")),
            int(os.environ.get("NX_ORACLE_MESH_PER_PROG", default_per_prog)))


def _splittable(prog: dict) -> bool:
    return any(s % 2 == 0 for s in prog["axes"].values())


def sample(n: int, seed: int) -> list:
    """The first ``n`` programs of corpus ``seed`` (pinned ones first) that a mesh can split
    (or that must be rejected)."""
    out = [p for p in programs.PINNED if _splittable(p)]
    k = 0
    while len(out) < n:
        p = programs.one(seed, k)
        k += 1
        if _splittable(p) or p["expect"] == "reject":
            out.append(p)
    return out[:n]


def mesh_of(res: dict) -> str:
    """Which mesh an assignment runs on: ``'w'`` (1-d, 4) or ``'xy'`` (2x2)."""
    used = {a for r in res.values() if not isinstance(r, list)
            for a in (r if isinstance(r, tuple) else (r,)) if not isinstance(a, list)}
    return "w" if "w" in used else "xy"


def assignments(prog: dict, seed: int, per_prog: int) -> list:
    """Sensible ``axis_resources`` for ``prog`` (``["loop", k]`` is ``SerialLoop(k)``);
    ``per_prog`` > 0 keeps that many, chosen by ``seed`` and the program id."""
    axes = prog["axes"]
    even = [n for n, s in axes.items() if s % 2 == 0]
    four = [n for n in even if axes[n] % 4 == 0]
    odd = [n for n, s in axes.items() if s % 2 and s > 1]
    kinds: dict = {"x": [{n: "x"} for n in even], "y": [{n: "y"} for n in even],
                   "xy": [{n: ("x", "y")} for n in four], "w": [{n: "w"} for n in four],
                   "meshloop": [{n: ("x", ["loop", 2])} for n in four],
                   "two": [], "conflict": [], "loop": [],
                   "uneven": [{n: "x"} for n in odd[:1]]}
    for i, a in enumerate(even):
        for b in even[i + 1:]:
            kinds["two"].append({a: "x", b: "y"})
            kinds["conflict"].append({a: "x", b: "x"})
    for a in even:
        for b, s in axes.items():
            if b != a and s > 1:
                kinds["loop"].append({a: "x", b: ["loop", s]})
    kinds = {k: v for k, v in kinds.items() if v}
    if not per_prog or sum(map(len, kinds.values())) <= per_prog:
        return [r for v in kinds.values() for r in v]
    # a random pick of kinds, then one assignment of each (so every kind gets its turn)
    rng = random.Random(f"{seed}/{prog['id']}")
    picked = rng.sample(sorted(kinds), min(per_prog, len(kinds)))
    out = [rng.choice(kinds[k]) for k in picked]
    while len(out) < per_prog:
        r = rng.choice([r for v in kinds.values() for r in v])
        if r not in out:
            out.append(r)
    return out


def where(res: dict) -> str:
    return "axis_resources=" + ", ".join(
        f"{n}: {'SerialLoop(%d)' % r[1] if isinstance(r, list) else repr(r)}"
        for n, r in res.items())


def _resource(r):
    if isinstance(r, list):
        return nx.SerialLoop(r[1])
    return tuple(_resource(x) for x in r) if isinstance(r, tuple) else r


def _resources(res: dict) -> dict:
    return {n: _resource(r) for n, r in res.items()}


def run_on(prog: dict, res: dict, mesh) -> dict:
    """``prog`` with ``axis_resources=res`` inside ``mesh``; :func:`torch_interp.run`'s result
    format (the outputs brought back to the CPU)."""
    be = torch_interp.TorchBackend()
    named: list = []

    def fn(*args):
        env = dsl.run_body(prog["body"], torch_interp.flatten_like(prog["args"], args), be)
        out = dsl.outputs(prog["out"], env)
        named[:] = [torch_interp._names(x) for x in torch_interp.flatten_like(prog["out"], out)]
        return out

    args = dsl.build_args(prog, torch.from_numpy)
    try:
        f = nx.xmap(fn, in_axes=dsl.decode_spec(prog["in_axes"]),
                    out_axes=dsl.decode_spec(prog["out_axes"]),
                    axis_sizes=prog.get("axis_sizes") or None, axis_resources=_resources(res))
        with mesh:
            out = f(*args)
        outs = []
        for o in torch_interp.flatten_like(prog["out"], out):
            if not isinstance(o, torch.Tensor) or isinstance(o, nx.NamedTensor):
                raise TypeError(f"xmap returned a {type(o).__name__}, not a plain tensor")
            if type(o).__name__ == "DTensor":
                raise TypeError("xmap returned a DTensor, not a full tensor")
            outs.append(o.detach().cpu().numpy())
    except nx.NamedAxisError as e:
        return {"status": "rejected", "exc": type(e).__name__, "msg": str(e)[:300],
                "named_axis_error": True}
    except Exception as e:  # noqa: BLE001 - recorded, judged by the comparison
        return {"status": "rejected", "exc": type(e).__name__, "msg": str(e)[:300],
                "named_axis_error": False}
    return {"status": "ok", "outs": outs, "named": named}


def judge(res: dict, rres: dict, vres: dict) -> list:
    """Differences (``compare.Diff``) between a mesh run and the vectorized run."""
    w = where(res)
    diffs = compare.vs_vectorized({}, rres, vres)
    for d in diffs:
        d.where = w
    if diffs or rres["status"] != "ok":
        return diffs
    for j, (g, v) in enumerate(zip(rres["named"], vres["named"])):
        if g != v:
            diffs.append(compare.Diff("resources_named_shape", f"output {j}: named shape {g} "
                                      f"inside the xmap, the vectorized run has {v}", w))
    return diffs


def run_sample(progs: list, seed: int, per_prog: int, meshes: dict, sync=None,
               progress=None) -> dict:
    """Run every assignment of every program; ``{"runs": {...}, "fails": [...]}``.

    ``meshes`` maps ``'xy'``/``'w'`` to a mesh; ``sync(tag)`` (gloo) returns a message
    when the ranks disagree on what they ran and how it ended; ``progress(text)``
    records the run about to start (for a report if the ranks hang).
    """
    runs: dict = {}
    fails: list = []
    for prog in progs:
        vres = torch_interp.run(prog)
        for res in assignments(prog, seed, per_prog):
            if progress:
                progress(f"{prog['id']} {where(res)}")
            rres = run_on(prog, res, meshes[mesh_of(res)])
            bad = sync(f"{prog['id']} {where(res)}: {rres['status']} {rres.get('exc', '')}") \
                if sync else None
            if bad:
                fails.append({"id": prog["id"], "kind": "ranks_disagree", "where": where(res),
                              "msg": bad})
            key = f"{mesh_of(res)} {rres['status']}" + (
                f" {rres['exc']}" if rres["status"] != "ok" else "")
            runs[key] = runs.get(key, 0) + 1
            for d in judge(res, rres, vres):
                fails.append({"id": prog["id"], "kind": d.kind, "where": d.where,
                              "msg": d.msg})
    return {"runs": runs, "fails": fails}


def unknown(result: dict, progs: list) -> tuple:
    """``(result with only the differences no known class explains, {class: count})``."""
    by_id = {p["id"]: p for p in progs}
    bad, by_class = [], {}
    for f in result["fails"]:
        c = known.classify(by_id[f["id"]], compare.Diff(f["kind"], f["msg"], f["where"]))
        if c is None:
            bad.append(f)
        else:
            by_class[c] = by_class.get(c, 0) + 1
    return dict(result, fails=bad), by_class


def describe(prog: dict) -> str:
    """The program as text (as ``show.py`` prints it), for failure reports."""
    return "\n".join([
        f"== {prog['id']} ({prog['cat']}) axes={prog['axes']} axis_sizes={prog['axis_sizes']}",
        f"arrays: {[(a['shape'], a['dtype']) for a in prog['arrays']]}",
        f"in_axes: {prog['in_axes']}", f"out_axes: {prog['out_axes']}",
        f"body: {json.dumps(prog['body'])}", f"out: {prog['out']}"])


def report(result: dict, progs: list, limit: int = 12) -> str:
    """A failure report: each failing run, then its program's text."""
    by_id = {p["id"]: p for p in progs}
    lines = [f"{len(result['fails'])} runs differ from the vectorized run "
             f"(runs: {result['runs']}):"]
    for f in result["fails"][:limit]:
        lines += [f"[{f['id']}] {f['where']}: {f['kind']}: {f['msg']}", describe(by_id[f["id"]]),
                  ""]
    return "\n".join(lines)
