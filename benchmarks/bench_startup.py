"""Start-up costs, each measured in fresh processes: ``import`` and the first compiled call.

Issue 12's targets: ``import named_axes`` ≤ 1.3× ``import torch`` (wall, same run); the
first call of ``nx.jit`` on the P1 small training step (loss + gradients, weights that
require grad) with a warm cache ≤ 2× JAX's first call, and with a cold cache ≤
``torch.compile``'s cold first call. "Cold" is a fresh ``TORCHINDUCTOR_CACHE_DIR``; "warm"
is a second process reusing the directory the cold run filled (what a user's second
training run sees). nx.jit is measured as it is and with its program store (opt-in,
kept under the same directory). JAX has no on-disk cache here: every JAX first call is
cold.

Run alone: ``python benchmarks/bench_startup.py`` (prints the markdown section).

>>> callable(main)
True
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# One child process per measurement; it prints one JSON line {"s": seconds}.
_FIRST_CALL = r"""
import json, os, sys, time
sys.path[:0] = [{here!r}, {root!r}]
import torch
torch.set_num_threads(1)
import programs
variants = {{v.key: v for v in programs.make_p1(8, 16, 16, 4)}}
v = variants[{key!r}]
if {key!r}.startswith("jax"):
    programs.jax_modules()
elif {key!r}.startswith("nx"):
    programs.nx_module()
t0 = time.perf_counter()
step = v.build()
step()
first = time.perf_counter() - t0
save = 0.0
if {key!r}.startswith("nx"):   # the program store saves its programs at exit
    from named_axes.transforms import _store
    t0 = time.perf_counter()
    _store.flush()
    save = time.perf_counter() - t0
print(json.dumps({{"s": first, "save": save}}))
"""

# (label, variant key, with a program store)
FIRST_CALLS = [("torch.compile", "compile", False), ("nx.jit", "nx.jit", False),
               ("nx.jit + program store", "nx.jit", True), ("JAX jit", "jax.jit", False)]

# The floor under any make_fx-based first call: torch 2.13's tracer imports
# torch._inductor (and with it torch._dynamo) when it builds its dispatch mode.
_MAKE_FX_FLOOR = r"""
import json, time
import torch
from torch.fx.experimental.proxy_tensor import make_fx
t0 = time.perf_counter()
make_fx(lambda x: x + 1)(torch.ones(2))
print(json.dumps({"s": time.perf_counter() - t0}))
"""


def _child(code: str, env: dict | None = None, timeout: float = 600, field: str = "s"):
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=timeout, cwd=ROOT)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr.strip()
                           else f"exit {res.returncode}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return out if field == "*" else out[field]


def _wall(code: str) -> float:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT,
                         timeout=300)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.decode()[-500:])
    return time.perf_counter() - t0


def _drop_bytecode() -> None:
    for folder, _, files in os.walk(os.path.join(ROOT, "named_axes")):
        if os.path.basename(folder) == "__pycache__":
            for f in files:
                os.remove(os.path.join(folder, f))


def measure_import(reps: int = 7) -> dict[str, float]:
    """Median wall time of a process that imports torch, and one that also imports us:
    with named_axes' bytecode written, as ``pip install`` writes it for torch and for any
    installed wheel (``named_axes``), and without it (``named_axes from source``: an
    editable checkout under ``PYTHONDONTWRITEBYTECODE``, as on this project's machines,
    compiles every module at each import)."""
    import compileall

    torch_only, both, source = [], [], []
    for _ in range(reps):  # interleaved, so load drifts hit all alike
        _drop_bytecode()
        source.append(_wall("import torch, named_axes"))
        compileall.compile_dir(os.path.join(ROOT, "named_axes"), quiet=1)
        torch_only.append(_wall("import torch"))
        both.append(_wall("import torch, named_axes"))
    return {"torch": statistics.median(torch_only), "named_axes": statistics.median(both),
            "named_axes from source": statistics.median(source)}


def measure_first_calls(reps: int = 3, log=print) -> dict[tuple[str, str], float]:
    """Median first-call seconds per (variant, cache state); a variant that fails is left out."""
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(reps):
        for label, key, store in FIRST_CALLS:
            code = _FIRST_CALL.format(here=HERE, root=ROOT, key=key)
            try:
                if key.startswith("jax"):
                    times.setdefault((label, "cold"), []).append(_child(code))
                    continue
                with tempfile.TemporaryDirectory(prefix="nx-bench-inductor-") as cache:
                    env = {"TORCHINDUCTOR_CACHE_DIR": cache}
                    if store:
                        env["NAMED_AXES_PROGRAM_STORE"] = os.path.join(cache, "programs")
                    cold = _child(code, env, field="*")
                    times.setdefault((label, "cold"), []).append(cold["s"])
                    if store:
                        times.setdefault((label, "saved after"), []).append(cold["save"])
                    times.setdefault((label, "warm"), []).append(_child(code, env))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"   {label}: {e}")
    floor = []
    for _ in range(reps):
        try:
            floor.append(_child(_MAKE_FX_FLOOR))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log(f"   make_fx floor: {e}")
    out = {k: statistics.median(v) for k, v in times.items() if v}
    if floor:
        out[("make_fx of x + 1", "floor")] = statistics.median(floor)
    return out


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def report(imports: dict[str, float], first: dict[tuple[str, str], float]) -> list[str]:
    ratio = imports["named_axes"] / imports["torch"]
    lines = ["## Start-up: import and first call (fresh processes)", "",
             "| measurement | time (median) | ratio | target |", "|---|---|---|---|",
             f"| `python -c 'import torch'` | {imports['torch']:.2f} s | 1.0 | |",
             f"| `python -c 'import torch, named_axes'` | {imports['named_axes']:.2f} s | "
             f"{ratio:.2f} | {_verdict(ratio <= 1.3)} ≤ 1.3× |"]
    if "named_axes from source" in imports:
        src = imports["named_axes from source"]
        lines.append(f"| the same, named_axes compiled from source (no bytecode) | {src:.2f} s | "
                     f"{src / imports['torch']:.2f} | |")
    jax_first = first.get(("JAX jit", "cold"))
    compile_cold = first.get(("torch.compile", "cold"))
    floor = first.pop(("make_fx of x + 1", "floor"), None)
    saved = {label: s for (label, state), s in first.items() if state == "saved after"}
    for (label, state), s in sorted(first.items()):
        if state == "saved after":
            continue
        target = ""
        if label.startswith("nx.jit") and state == "warm" and jax_first:
            target = (f"{_verdict(s <= 2 * jax_first)} ≤ 2× JAX first call "
                      f"({s / jax_first:.2f}×)")
        if label.startswith("nx.jit") and state == "cold" and compile_cold:
            target = (f"{_verdict(s <= compile_cold)} ≤ torch.compile cold "
                      f"({s / compile_cold:.2f}×)")
        shown = f"{s * 1e3:.1f} ms" if s < 0.1 else f"{s:.2f} s"
        lines.append(f"| P1 small train step, {label}, first call, {state} cache | "
                     f"{shown} | | {target} |")
    lines += ["", "Imports: named_axes' bytecode is written before the timed imports, as "
              "`pip install` writes it for torch and any installed wheel; the row without "
              "it is an editable checkout under `PYTHONDONTWRITEBYTECODE` (this machine's "
              "environment), which compiles every module at each import."]
    lines += ["", "First call = building the step, tracing, compiling (forward and backward) and "
              "one run, in a fresh process after its imports (median of three launches). "
              "Cold: an empty `TORCHINDUCTOR_CACHE_DIR`; warm: a second process on the "
              "directory the cold run filled. JAX: `jax.jit(value_and_grad)` of the same "
              "loss, no persistent cache."]
    for label, s in saved.items():
        lines += ["", f"{label}: opt-in (`NAMED_AXES_PROGRAM_STORE`, like JAX's persistent "
                  "cache). The cold process compiles as usual and serves its first call; at "
                  "exit it exports the program and compiles it into the store with AOTInductor's "
                  "packaging "
                  f"({s:.1f} s, measured here by a flush after the first call). The warm "
                  "process identifies the program by one eager call under a recording dispatch "
                  "mode and loads that package: no tracing, no inductor, no dynamo "
                  "(`named_axes/transforms/_store.py`)."]
    if floor is not None:
        lines += ["", f"Floor under a traced warm first call: `make_fx(lambda x: x + 1)` in a "
                  f"fresh process after `import torch` takes {floor:.2f} s (torch 2.13's tracer "
                  "imports `torch._inductor`, and with it `torch._dynamo`, when it builds its "
                  "dispatch mode; `FakeTensorMode` imports `torch._dynamo.config`). Without a "
                  "program store nx.jit traces before inductor's cache can answer, so its warm "
                  "first call cannot fall below this floor; 2x JAX's first call is "
                  + (f"{2 * jax_first:.2f} s." if jax_first else "not measured here.")]
    return lines + [""]


def main(log=print) -> list[str]:
    log("== start-up: import times")
    imports = measure_import()
    log(f"   import torch {imports['torch']:.2f} s, + named_axes {imports['named_axes']:.2f} s "
        f"(from source {imports['named_axes from source']:.2f} s)")
    log("== start-up: first calls (fresh processes, cold / warm inductor cache)")
    first = measure_first_calls(log=log)
    for k, s in sorted(first.items()):
        log(f"   {k[0]:14s} {k[1]:5s} {s:.2f} s")
    return report(imports, first)


if __name__ == "__main__":
    print("\n".join(main(log=lambda m: print(m, file=sys.stderr))))
