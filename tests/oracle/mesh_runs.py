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

import contextlib
import json
import os
import random

import numpy as np
import torch
from torch.utils._pytree import tree_leaves, tree_map

import named_axes as nx

import compare
import dsl
import known
import oracle_programs as programs
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


def _cotangent(prog: dict, j: int, shape) -> torch.Tensor:
    """A fixed cotangent for output ``j`` (the same on every rank and in every run)."""
    g = torch.Generator().manual_seed(sum(map(ord, f"{prog['id']}/{j}")))
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64)


def run_on(prog: dict, res: dict, mesh, grads: bool = False, jit: bool = False) -> dict:
    """``prog`` with ``axis_resources=res`` inside ``mesh``; :func:`torch_interp.run`'s result
    format (the outputs brought back to the CPU).  With ``grads``, also the gradients of
    ``sum(output * fixed cotangent)`` with respect to the floating inputs, taken by
    ``torch.autograd`` outside the xmap (``"grads"``: arrays, None for an input the outputs
    do not depend on; or ``"grad_exc"``/``"grad_msg"``/``"grad_named_axis_error"``).
    With ``jit``, the xmap runs as ``nx.jit(backend='eager')``'s program (on a mesh,
    with gradients: traced with its backward and cut in two, transforms/_jit_program.py)."""
    be = torch_interp.TorchBackend()
    named: list = []

    def fn(*args):
        env = dsl.run_body(prog["body"], torch_interp.flatten_like(prog["args"], args), be)
        out = dsl.outputs(prog["out"], env)
        named[:] = [torch_interp._names(x) for x in torch_interp.flatten_like(prog["out"], out)]
        return out

    args = dsl.build_args(prog, torch.from_numpy)
    if grads:
        args = tree_map(lambda t: t.detach().clone().requires_grad_()
                        if isinstance(t, torch.Tensor) and t.is_floating_point() else t, args)
    try:
        f = nx.xmap(fn, in_axes=dsl.decode_spec(prog["in_axes"]),
                    out_axes=dsl.decode_spec(prog["out_axes"]),
                    axis_sizes=prog.get("axis_sizes") or None, axis_resources=_resources(res))
        f = nx.jit(f, backend="eager") if jit else f
        with mesh:
            out = f(*args)
        flat = torch_interp.flatten_like(prog["out"], out)
        outs = []
        for o in flat:
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
    result = {"status": "ok", "outs": outs, "named": named}
    if grads:
        result.update(_grads(prog, args, flat))
    return result


def _grads(prog: dict, args, flat: list) -> dict:
    inputs = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad]
    terms = [(o * _cotangent(prog, j, o.shape).to(o.dtype)).sum()
             for j, o in enumerate(flat) if o.requires_grad and o.is_floating_point()]
    if not inputs or not terms:
        return {"grads": []}
    try:
        gs = torch.autograd.grad(sum(terms), inputs, allow_unused=True)
    except nx.NamedAxisError as e:
        return {"grad_exc": type(e).__name__, "grad_msg": str(e)[:300],
                "grad_named_axis_error": True}
    except Exception as e:  # noqa: BLE001 - recorded, judged by the comparison
        return {"grad_exc": type(e).__name__, "grad_msg": str(e)[:300],
                "grad_named_axis_error": False}
    # a gradient through forward mode under vmap may come back as torch's efficient
    # ZeroTensor (torch.func.vmap(torch.func.hessian(abs)) does too), which numpy refuses
    return {"grads": [None if g is None else np.zeros(tuple(g.shape), _np_dtype(g))
                      if g._is_zerotensor() else g.detach().cpu().numpy() for g in gs]}


def _np_dtype(t: torch.Tensor):
    return torch.empty((), dtype=t.dtype).numpy().dtype


def judge_grads(res: dict, rres: dict, gref: dict) -> list:
    """The gradients of a mesh run (``run_on(..., grads=True)``) against the vectorized
    run's (``gref``): equal, or the mesh run's backward raised a ``NamedAxisError``."""
    w = where(res)
    if rres["status"] != "ok" or gref["status"] != "ok" or "grads" not in gref:
        return []
    if "grad_exc" in rres:
        if rres["grad_named_axis_error"]:
            return []
        return [compare.Diff("resources_grad_raw_error",
                             f"backward: {rres['grad_exc']}: {rres['grad_msg']}", w)]
    got, want = rres["grads"], gref["grads"]
    pairs = [(np.zeros_like(v) if g is None else g, np.zeros_like(g) if v is None else v)
             for g, v in zip(got, want) if g is not None or v is not None]
    return [compare.Diff("resources_grad_" + d.kind, "gradient of " + d.msg, w)
            for d in compare._outs_diff([g for g, _ in pairs], [v for _, v in pairs], w)]


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
               progress=None, grads: bool = False, jit_every: int = 0) -> dict:
    """Run every assignment of every program; ``{"runs": {...}, "fails": [...]}``.

    ``meshes`` maps ``'xy'``/``'w'`` to a mesh; ``sync(tag)`` (gloo) returns a message
    when the ranks disagree on what they ran and how it ended; ``progress(text)``
    records the run about to start (for a report if the ranks hang); with ``grads``
    every run's input gradients are compared too (:func:`judge_grads`); with
    ``jit_every=k``, every k-th program's assignments also run under ``nx.jit``
    (:func:`run_on`'s ``jit``; counted and judged as ``jit <mesh> <status>``).
    """
    runs: dict = {}
    fails: list = []
    for k, prog in enumerate(progs):
        vres = torch_interp.run(prog)
        gref = run_on(prog, {}, contextlib.nullcontext(), grads=True) if grads else None
        jits = (False, True) if jit_every and k % jit_every == 0 else (False,)
        for res in assignments(prog, seed, per_prog):
            for jit in jits:
                label = ("jit " if jit else "") + where(res)
                if progress:
                    progress(f"{prog['id']} {label}")
                rres = run_on(prog, res, meshes[mesh_of(res)], grads=grads, jit=jit)
                bad = sync(f"{prog['id']} {label}: {rres['status']} {rres.get('exc', '')}") \
                    if sync else None
                if bad:
                    fails.append({"id": prog["id"], "kind": "ranks_disagree", "where": label,
                                  "msg": bad})
                key = ("jit " if jit else "") + f"{mesh_of(res)} {rres['status']}" + (
                    f" {rres['exc']}" if rres["status"] != "ok" else "")
                runs[key] = runs.get(key, 0) + 1
                for d in judge(res, rres, vres) + (judge_grads(res, rres, gref) if grads
                                                   else []):
                    fails.append({"id": prog["id"], "kind": d.kind,
                                  "where": ("jit " if jit else "") + d.where, "msg": d.msg})
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
    if len(result["fails"]) > limit:   # the rest, one line each
        lines.append("and:")
        lines += [f"[{f['id']}] {f['where']}: {f['kind']}: {f['msg'].splitlines()[0][:120]}"
                  for f in result["fails"][limit:]]
    return "\n".join(lines)
