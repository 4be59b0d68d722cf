"""Run a corpus both ways: JAX in one ``.venv-jax`` subprocess, named_axes in this process.

:func:`run_corpus` writes the corpus to JSON, starts ``jax_runner.py`` under the JAX
python (``NX_ORACLE_JAX_PYTHON``) and, while it runs, interprets every program with
named_axes (vectorized, then under each of its ``resources``, and every ``JIT_EVERY``-th
program under ``nx.jit`` with the eager backend: traced by make_fx, run from the graph;
a program that differentiates also runs on other data, which must not change its named
shapes or whether it is accepted),
so the two sides use the two cores together.  JAX results are cached under ``tests/oracle/.cache`` keyed by a hash
of the corpus, ``jax_runner.py`` and ``dsl.py`` (a fresh checkout recomputes them).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np

import compare
import oracle_programs as programs
import torch_interp

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache")
# every how many programs also run under nx.jit (``NX_ORACLE_JIT_EVERY``; the fuzz target: 1)
JIT_EVERY = max(1, int(os.environ.get("NX_ORACLE_JIT_EVERY", "4")))
# every how many programs also run under torch.compile(fullgraph=True) (dynamo only)
COMPILE_EVERY = max(1, int(os.environ.get("NX_ORACLE_COMPILE_EVERY", "10")))


@dataclass
class Outcome:
    corpus: list
    jax: dict
    fails: list = field(default_factory=list)     # (prog, Diff)
    seconds: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)      # "SerialLoop ok" etc. -> count


def _key(blob: str) -> str:
    h = hashlib.sha256(blob.encode())
    for f in ("jax_runner.py", "dsl.py"):
        with open(os.path.join(HERE, f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def start_jax(corpus: list, python: str):
    """Start the JAX subprocess (or find cached results); returns a ``finish()`` callable
    giving ``(results, arrays)``."""
    blob = json.dumps(corpus, sort_keys=True)
    os.makedirs(CACHE, exist_ok=True)
    stem = os.path.join(CACHE, _key(blob))
    if os.path.exists(stem + ".json") and os.path.exists(stem + ".npz"):
        proc = None
    else:
        with open(stem + ".corpus.json", "w") as f:
            f.write(blob)
        proc = subprocess.Popen([python, os.path.join(HERE, "jax_runner.py"),
                                 stem + ".corpus.json", stem + ".tmp.json", stem + ".npz"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish():
        if proc is not None:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"jax_runner failed ({proc.returncode}):\n{out[-4000:]}")
            os.replace(stem + ".tmp.json", stem + ".json")
            os.remove(stem + ".corpus.json")
        with open(stem + ".json") as f:
            meta = json.load(f)
        arrays = dict(np.load(stem + ".npz"))
        return meta, arrays
    return finish


def run_corpus(n: int, seed: int, python: str) -> Outcome:
    t0 = time.time()
    corpus = programs.generate(n, seed)
    finish = start_jax(corpus, python)
    t1 = time.time()
    vec, res_runs, jit_runs, compile_runs, data_runs = {}, {}, {}, {}, {}
    for k, prog in enumerate(corpus):
        vec[prog["id"]] = torch_interp.run(prog)
        if _differentiates(prog):   # the same program on other data: the same named shapes
            data_runs[prog["id"]] = torch_interp.run(prog, fill=1.0)
        res_runs[prog["id"]] = [(r, torch_interp.run(prog, r)) for r in prog.get("resources", ())]
        if k % JIT_EVERY == 0:
            jit_runs[prog["id"]] = torch_interp.run(prog, jit=True)
        if k % COMPILE_EVERY == 0:
            compile_runs[prog["id"]] = torch_interp.run(prog, compiled=True)
    t2 = time.time()
    meta, arrays = finish()
    t3 = time.time()
    out = Outcome(corpus, meta, seconds={"generate": t1 - t0, "named_axes": t2 - t1,
                                         "jax_wait": t3 - t2,
                                         "jax_runner": meta.get("seconds", 0.0)})
    for prog in corpus:
        jres = meta["results"][prog["id"]]
        for d in compare.vs_jax(prog, jres, arrays, vec[prog["id"]]):
            out.fails.append((prog, d))
        for r, rres in res_runs[prog["id"]]:
            what = "mesh" if any(isinstance(v, str) for v in r.values()) else "SerialLoop"
            key = f"{what} {rres['status']}"
            out.runs[key] = out.runs.get(key, 0) + 1
            for d in compare.vs_vectorized(r, rres, vec[prog["id"]]):
                out.fails.append((prog, d))
        if prog["id"] in data_runs:
            for d in compare.vs_other_data(data_runs[prog["id"]], vec[prog["id"]]):
                out.fails.append((prog, d))
        if prog["id"] in jit_runs:
            jres = jit_runs[prog["id"]]
            key = f"nx.jit {jres['status']}"
            out.runs[key] = out.runs.get(key, 0) + 1
            for d in compare.vs_vectorized({}, jres, vec[prog["id"]], where="nx.jit"):
                out.fails.append((prog, d))
        if prog["id"] in compile_runs:
            cres, vres = compile_runs[prog["id"]], vec[prog["id"]]
            key = f"torch.compile {cres['status']}"
            out.runs[key] = out.runs.get(key, 0) + 1
            if not (cres["status"] == vres["status"] == "rejected"):   # (same decision)
                for d in compare.vs_vectorized({}, cres, vres, where="torch.compile"):
                    out.fails.append((prog, d))
    return out


def _differentiates(prog: dict) -> bool:
    """Whether the program takes a derivative (where named shapes were once decided by
    comparing values: issue 30 item 5) or has control flow a tensor's value may decide
    (a cond whose branch not taken, a loop that ran no step, once dropped named axes)."""
    blob = json.dumps(prog["body"])
    return any(f'"op": "{op}"' in blob for op in ("grad", "xform", "cond", "while", "fori"))
