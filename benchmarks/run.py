#!/usr/bin/env python
"""named_axes benchmark suite (issue 8): ``make bench`` runs

    .venv/bin/python benchmarks/run.py --out benchmarks/RESULTS.md

One process; per program every variant (plain torch eager, torch.compile,
torch.func.vmap, functorch.dim, named_axes eager / value_and_grad / jit, JAX jit, JAX
xmap) is checked numerically against plain torch eager, then timed interleaved; the
table reports medians of paired ratios to plain torch eager (see ``harness.py``).
Variants whose library piece is missing are reported as "n/a", never a crash.

``--quick`` is a smoke run (few rounds, short blocks); timings from it mean nothing.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)

import torch  # noqa: E402

import harness  # noqa: E402
import programs  # noqa: E402
from harness import NotAvailable, Result, Variant, fmt_cell, fmt_time, measure  # noqa: E402

COLUMNS = [
    ("eager", "torch eager"),
    ("compile", "torch.compile"),
    ("vmap", "torch.func.vmap"),
    ("fdim", "functorch.dim"),
    ("nx.xmap", "nx.xmap eager"),
    ("nx.compile", "torch.compile(nx.xmap)"),
    ("nx.vg", "nx.value_and_grad eager"),
    ("nx.jit", "nx.jit (whole step)"),
    ("nx.jit.fb", "nx.jit fwd + autograd bwd"),
    ("jax.jit", "JAX jit(value_and_grad(vmap))"),
    ("jax.xmap", "JAX 0.4.30 xmap"),
    ("nx.jit.det", "extra: nx.jit, detached weights"),
]

# Targets from issue 8 (ratio to torch eager). "jax" = at most JAX jit's ratio in this run;
# "min_torch" = at most min(torch eager, torch.compile).
# issue 29: "compile_1.05" = torch.compile(xmap(f)) at most 1.05x torch.compile of the
# positional twin in this run.
TARGETS = {
    "p1_small": {"nx.xmap": 2.0, "nx.jit": "jax", "nx.compile": "compile_1.05"},
    "p1_tutorial": {"nx.xmap": 1.10, "nx.jit": "jax", "nx.compile": "compile_1.05"},
    "p2_attention": {"nx.xmap": 1.15, "nx.jit": "min_torch", "nx.compile": "compile_1.05"},
    "p3_chain": {"nx.xmap": 2.5, "nx.jit": "jax", "nx.compile": "compile_1.05"},
    # issue 12: training steps with Adam, weights that require grad
    "p1_small_train": {"nx.jit": "compile_and_jax"},
    "p1_tutorial_train": {"nx.jit": "compile_and_jax"},
    "p2_attention_train": {"nx.jit": "min_torch"},
}


# ---------------------------------------------------------------------------------
# environment description
# ---------------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(mod: str) -> str:
    try:
        m = importlib.import_module(mod)
        return getattr(m, "__version__", "?")
    except Exception:
        return "not installed"


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "named_axes"],
                               capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + (" (+ uncommitted named_axes changes)"
                                     if dirty.stdout.strip() else "")
    except Exception:
        return "?"


def environment(argv: list[str]) -> list[str]:
    return [
        f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {_cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"torch threads {torch.get_num_threads()}, load average at start "
        f"{', '.join(f'{v:.1f}' for v in os.getloadavg())}, {platform.platform()}",
        f"- versions: python {platform.python_version()}, torch {torch.__version__}, "
        f"numpy {_version('numpy')}, jax {_version('jax')}, jaxlib {_version('jaxlib')}, "
        f"named_axes {_version('named_axes')} @ {_git_commit()}",
        f"- command: `{' '.join(['python'] + [os.path.relpath(argv[0], ROOT)] + argv[1:])}`"
        " (from the repo root; `make bench` runs it with `--out benchmarks/RESULTS.md`, "
        "`make bench-autotune` in max-autotune mode)",
    ]


# ---------------------------------------------------------------------------------
# P1–P3: the ratio table
# ---------------------------------------------------------------------------------

def run_programs(names, keys, rounds, block_s, warmup, log) -> dict[str, dict[str, Result]]:
    all_results = {}
    for name in names:
        title, make = programs.PROGRAMS[name]
        log(f"== {name}: {title}")
        variants = [v for v in make() if keys is None or v.key in keys or v.key == "eager"]
        t0 = time.perf_counter()
        res = measure(variants, rounds=rounds, block_s=block_s, warmup=warmup)
        all_results[name] = res
        for k, r in res.items():
            extra = f"  [{r.note}]" if r.note else ""
            log(f"   {k:10s} {fmt_cell(r):24s} {r.status}{extra}")
        log(f"   ({time.perf_counter() - t0:.1f} s)")
    return all_results


def _target_verdict(name: str, key: str, res: dict[str, Result]) -> str:
    t = TARGETS.get(name, {}).get(key)
    r = res.get(key)
    if t is None or r is None or r.status != "ok":
        return ""
    if t == "jax":
        j = res.get("jax.jit")
        if j is None or j.status != "ok":
            return ""
        bound, what = j.ratio, "JAX jit"
    elif t == "compile_and_jax":
        bounds = [res[k].ratio for k in ("compile", "jax.jit")
                  if res.get(k) is not None and res[k].status == "ok"]
        if not bounds:
            return ""
        bound, what = min(bounds), "min(torch.compile, JAX jit)"
    elif isinstance(t, str) and t.startswith("compile_"):   # factor x torch.compile
        c, factor = res.get("compile"), float(t.split("_")[1])
        if c is None or c.status != "ok":
            return ""
        bound, what = factor * c.ratio, f"{factor} × torch.compile"
    elif t == "min_torch":
        c = res.get("compile")
        bound = min(1.0, c.ratio) if c is not None and c.status == "ok" else 1.0
        what = "min(eager, compile)"
    else:
        bound, what = float(t), f"{t}×"
    ok = r.ratio <= bound
    return f"{'meets' if ok else 'MISSES'} target ≤ {what} ({bound:.2f})"


def program_tables(all_results) -> list[str]:
    present = [(k, label) for k, label in COLUMNS
               if any(k in res for res in all_results.values())]
    lines = [
        "| program | " + " | ".join(label for _, label in present) + " |",
        "|---|" + "---|" * len(present),
    ]
    for name, res in all_results.items():
        cells = [fmt_cell(res.get(k)) for k, _ in present]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: median of paired ratios to torch eager (median time per step). "
                 "n/a = library piece not available; error / WRONG: see notes.")
    lines.append("")
    # details
    lines.append("### Details")
    lines.append("")
    lines.append("| program | variant | status | median time | ratio | ratio IQR | calls/block × rounds | max abs err | note |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for name, res in all_results.items():
        for k, r in res.items():
            if r.status == "ok":
                iqr = f"{r.ratio_q1:.2f}–{r.ratio_q3:.2f}"
                cnt = f"{r.n_per_block} × {r.rounds}"
                err = f"{r.max_err:.1e}"
                t, ratio = fmt_time(r.median_s), f"{r.ratio:.3f}"
            else:
                iqr = cnt = err = t = ratio = "–"
            note = (r.note or _target_verdict(name, k, res)).replace("|", "\\|")
            lines.append(f"| {name} | {k} | {r.status} | {t} | {ratio} | {iqr} | {cnt} | {err} | {note} |")
    lines.append("")
    return lines


# ---------------------------------------------------------------------------------
# P4: trace + compile time
# ---------------------------------------------------------------------------------

def _fresh_compile_config():
    """Disable inductor's on-disk caches so each repetition compiles for real."""
    import contextlib

    stack = contextlib.ExitStack()
    try:
        stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    except Exception:
        pass
    try:
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    except Exception:
        pass
    return stack


def p4_cases():
    """(case, variant, builder) where builder() returns a first-call closure."""
    w1, w2, images, labels = programs.p1_data(8, 16, 16, 4)
    g = torch.Generator().manual_seed(0)
    x3, y3 = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)

    def p1_compile():
        torch._dynamo.reset()
        params = (w1.clone().requires_grad_(), w2.clone().requires_grad_())
        f = torch.compile(programs.p1_loss)

        def first():
            loss = f(*params, images, labels)
            torch.autograd.grad(loss, params)
        return first

    def p1_nxjit():
        nx = programs.nx_module()
        programs.need(nx, "xmap", "value_and_grad", "jit")
        torch._dynamo.reset()
        f = nx.jit(nx.value_and_grad(nx.xmap(programs.p1_named_loss(nx),
                                             in_axes=programs.P1_IN_AXES, out_axes=[...]),
                                     argnums=(0, 1)))
        return lambda: f(w1, w2, images, labels)

    def p3_compile():
        torch._dynamo.reset()
        f = torch.compile(programs.p3_chain)
        return lambda: f(x3, y3)

    def p3_nxjit():
        nx = programs.nx_module()
        programs.need(nx, "xmap", "jit")
        torch._dynamo.reset()
        f = nx.jit(nx.xmap(programs.p3_chain, in_axes=["a", "b", ...], out_axes=["a", "b", ...]))
        return lambda: f(x3, y3)

    def p1_jax():
        jax, jnp = programs.jax_modules()
        v = [x for x in programs.make_p1(8, 16, 16, 4) if x.key == "jax.jit"][0]
        jax.clear_caches()
        return lambda: v.build()()

    return [("P1 small loss+grads", "torch.compile", p1_compile),
            ("P1 small loss+grads", "nx.jit", p1_nxjit),
            ("P1 small loss+grads", "JAX jit (build + first call)", p1_jax),
            ("P3 50 ops forward", "torch.compile", p3_compile),
            ("P3 50 ops forward", "nx.jit", p3_nxjit)]


def run_p4(reps: int, log) -> list[str]:
    log("== p4: trace + compile time (first call, caches disabled)")
    cases = p4_cases()
    times: dict[tuple, list] = {}
    notes: dict[tuple, str] = {}
    for rep in range(reps):
        order = cases if rep % 2 == 0 else list(reversed(cases))
        for case, var, build in order:
            key = (case, var)
            if key in notes:
                continue
            try:
                with _fresh_compile_config():
                    first = build()
                    t0 = time.perf_counter()
                    first()
                    times.setdefault(key, []).append(time.perf_counter() - t0)
            except NotAvailable as e:
                notes[key] = f"n/a ({e})"
            except Exception as e:
                notes[key] = f"error: {harness._short(e)}"
                traceback.print_exc()
    lines = ["| program | variant | first-call time (median) | reps | ratio to torch.compile |",
             "|---|---|---|---|---|"]
    for case, var, _ in cases:
        key = (case, var)
        if key in notes:
            lines.append(f"| {case} | {var} | {notes[key]} | – | – |")
            log(f"   {case:22s} {var:28s} {notes[key]}")
            continue
        med = statistics.median(times[key])
        ref = times.get((case, "torch.compile"))
        ratio = f"{med / statistics.median(ref):.2f}" if ref else "–"
        lines.append(f"| {case} | {var} | {fmt_time(med)} | {len(times[key])} | {ratio} |")
        log(f"   {case:22s} {var:28s} {fmt_time(med)}  (ratio {ratio})")
    lines.append("")
    lines.append("First call = tracing + compiling (forward and backward for P1) + one run; "
                 "inductor's FX-graph and AOT-autograd caches are disabled, dynamo is reset "
                 "before each repetition. The target (issue 8): nx.jit ≤ torch.compile.")
    lines.append("")
    return lines


# ---------------------------------------------------------------------------------
# dispatcher per-op overhead
# ---------------------------------------------------------------------------------

def overhead_cases():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    v = torch.randn(8, 16, generator=g)
    w = torch.randn(16, 16, generator=g)
    F = torch.nn.functional
    return [
        # (label, plain fn, named fn, inputs: (tensor, names))
        ("x + y (both named a, b)", lambda x, y: x + y, None, ((x, "ab"), (y, "ab"))),
        ("x * 0.9 (scalar)", lambda x: x * 0.9, None, ((x, "ab"),)),
        ("torch.tanh(x)", lambda x: torch.tanh(x), None, ((x, "ab"),)),
        ("x + y (y lacks b: broadcast by name)", lambda x, y: x + y[:, None], lambda x, y: x + y,
         ((x, "ab"), (y[:, 0], "a"))),
        ("x.sum('b') vs x.sum(1)", lambda x: x.sum(1), lambda x: x.sum("b"), ((x, "ab"),)),
        ("v @ w (v named a; w plain)", lambda v, w: v @ w, None, ((v, "a"), (w, ""))),
        ("x.softmax(-1) (x named a)", lambda x: x.softmax(-1), None, ((x, "a"),)),
        ("F.layer_norm (x named a)", lambda x: F.layer_norm(x, (16,)), None, ((x, "a"),)),
    ]


def run_overhead(rounds, block_s, log) -> list[str]:
    log("== dispatcher per-op overhead (outside xmap, nx.named values)")
    try:
        nx = programs.nx_module()
        programs.need(nx, "named", "positional")
    except NotAvailable as e:
        log(f"   n/a ({e})")
        return [f"n/a ({e})", ""]
    lines = ["| op | plain torch | NamedTensor | overhead per op | ratio |", "|---|---|---|---|---|"]
    for label, plain, named_fn, inputs in overhead_cases():
        named_fn = named_fn or plain
        tensors = [t for t, _ in inputs]
        nts = [nx.named(t, {i: n for i, n in enumerate(names)}) if names else t
               for t, names in inputs]
        out_names = []
        for _, names in inputs:
            out_names += [n for n in names if n not in out_names]

        def to_pos(o, out_names=out_names, label=label):
            if "sum('b')" in label:
                return nx.positional(o, {0: "a"})
            return nx.positional(o, {i: n for i, n in enumerate(out_names)})

        variants = [Variant("eager", lambda p=plain, t=tensors: (lambda: p(*t))),
                    Variant("named", lambda f=named_fn, t=nts: (lambda: f(*t)),
                            rtol=1e-5, atol=1e-6, convert=to_pos)]
        res = measure(variants, rounds=rounds, block_s=block_s, warmup=3, verbose=False)
        p, n = res["eager"], res["named"]
        if n.status != "ok":
            lines.append(f"| `{label}` | {fmt_time(p.median_s)} | {n.status}: {n.note} | – | – |")
            log(f"   {label:40s} {n.status}: {n.note}")
            continue
        over = n.median_s - p.median_s
        lines.append(f"| `{label}` | {fmt_time(p.median_s)} | {fmt_time(n.median_s)} | "
                     f"{fmt_time(over)} | {n.ratio:.1f} |")
        log(f"   {label:40s} plain {fmt_time(p.median_s):>9s}  named {fmt_time(n.median_s):>9s}"
            f"  ratio {n.ratio:.1f}")
    # xmap entry + exit alone: an identity program on the P3 inputs
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    if hasattr(nx, "xmap"):
        ident = nx.xmap(lambda x, y: x, in_axes=["a", "b", ...], out_axes=["a", "b", ...])
        res = measure([Variant("eager", lambda: (lambda: (lambda x, y: x)(x, y))),
                       Variant("named", lambda: (lambda: ident(x, y)))],
                      rounds=rounds, block_s=block_s, warmup=3, verbose=False)
        n = res["named"]
        if n.status == "ok":
            _XMAP_CALL[0] = n.median_s - res["eager"].median_s
            lines.append(f"| `xmap(lambda x, y: x)` entry + exit, 2 inputs (8, 16) | "
                         f"{fmt_time(res['eager'].median_s)} | {fmt_time(n.median_s)} | "
                         f"{fmt_time(_XMAP_CALL[0])} | – |")
            log(f"   {'xmap identity call':40s} {fmt_time(n.median_s)}")
    lines.append("")
    return lines


_XMAP_CALL = [None]  # measured xmap entry+exit cost, used by the P3 per-op summary


def p3_per_op(all_results) -> list[str]:
    res = all_results.get("p3_chain")
    if not res:
        return []
    e = res.get("eager")
    lines = []
    for k in ("nx.xmap", "fdim", "vmap"):
        r = res.get(k)
        if e and r and e.status == r.status == "ok":
            lines.append(f"- P3 {k}: {(r.median_s - e.median_s) / programs.N_OPS * 1e6:.1f} µs "
                         f"extra per op over plain torch ({fmt_time(e.median_s / programs.N_OPS)}"
                         " per op), entry/exit of the transform included")
    r = res.get("nx.xmap")
    if e and r and e.status == r.status == "ok" and _XMAP_CALL[0] is not None:
        per = (r.median_s - e.median_s - _XMAP_CALL[0]) / programs.N_OPS
        lines.append(f"- P3 nx.xmap without its entry/exit ({fmt_time(_XMAP_CALL[0])}, "
                     f"measured below): {per * 1e6:.1f} µs extra per op")
    return lines + ([""] if lines else [])


# ---------------------------------------------------------------------------------
# parallel benchmarks (owned by the parallelism helper)
# ---------------------------------------------------------------------------------

def run_parallel(log) -> list[str]:
    path = os.path.join(HERE, "bench_parallel.py")
    if not os.path.exists(path):
        return []
    log("== bench_parallel.main()")
    try:
        mod = importlib.import_module("bench_parallel")
        main = getattr(mod, "main", None)
        if main is None:
            return []
        out = main()
    except SystemExit:
        return []
    except Exception as e:
        log(f"   bench_parallel failed: {harness._short(e)}")
        return ["## Parallelism (benchmarks/bench_parallel.py)", "",
                f"failed: {harness._short(e)}", ""]
    if isinstance(out, (list, tuple)) and out and hasattr(mod, "table"):
        out = mod.table(out)
    elif isinstance(out, (list, tuple)) and out and isinstance(out[0], dict):
        keys = list(out[0])
        out = "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                        + ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |"
                           for r in out])
    if isinstance(out, str) and out.strip():
        return ["## Parallelism (benchmarks/bench_parallel.py)", "", out.strip(), ""]
    return []


def run_script(log, module: str, title: str) -> list[str]:
    """The markdown table ``benchmarks/<module>.py``'s ``main([])`` returns, under ``title``
    (a failure is reported in its place)."""
    log(f"== {module}.main()")
    head = [f"## {title} (benchmarks/{module}.py)", ""]
    try:
        text = importlib.import_module(module).main([])
    except (Exception, SystemExit) as e:
        log(f"   {module} failed: {harness._short(e)}")
        return head + [f"failed: {harness._short(e)}", ""]
    return head + [text, ""]


# ---------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------

def main(argv=None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the markdown report here (default: stdout only)")
    ap.add_argument("--quick", action="store_true", help="smoke run: few rounds, short blocks")
    ap.add_argument("--programs", default=",".join(programs.PROGRAMS),
                    help="comma list of: " + ", ".join(programs.PROGRAMS))
    ap.add_argument("--variants", default=None,
                    help="comma list of variant keys (eager always runs): "
                         + ", ".join(k for k, _ in COLUMNS))
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--block-ms", type=float, default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's own choice)")
    ap.add_argument("--mode", default=None,
                    help="torch.compile's mode for every compiled variant (torch.compile, "
                         "nx.jit), e.g. max-autotune; nx.jit's target is then <= 1.03x "
                         "torch.compile of the twin in that mode (issue 30)")
    ap.add_argument("--no-p4", action="store_true", help="skip trace+compile timing")
    ap.add_argument("--no-overhead", action="store_true", help="skip per-op overhead table")
    ap.add_argument("--no-parallel", action="store_true", help="skip bench_parallel.main()")
    ap.add_argument("--no-startup", action="store_true",
                    help="skip bench_startup (import time, first call cold/warm, fresh processes)")
    args = ap.parse_args(argv[1:])

    if args.mode not in (None, "default"):
        programs.MODE = args.mode
        for targets in TARGETS.values():
            targets.update({"nx.jit": "compile_1.03"})
    if args.threads:
        torch.set_num_threads(args.threads)
        if args.threads == 1:  # single-threaded XLA too (JAX is imported later, lazily)
            flags = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
            os.environ["XLA_FLAGS"] = flags.strip()
    rounds = args.rounds or (3 if args.quick else 25)
    block_s = (args.block_ms or (5.0 if args.quick else 60.0)) / 1000
    warmup = 1 if args.quick else 3
    names = [n.strip() for n in args.programs.split(",") if n.strip()]
    for n in names:
        if n not in programs.PROGRAMS:
            ap.error(f"unknown program {n!r}; choose from {', '.join(programs.PROGRAMS)}")
    keys = None if args.variants is None else {k.strip() for k in args.variants.split(",")}

    def log(msg):
        print(msg, flush=True)

    t_start = time.perf_counter()
    report = ["# named_axes benchmarks", ""]
    if args.quick:
        report += ["**Quick smoke run: these timings mean nothing.**", ""]
    report += environment(argv) + [""]

    # One core for the in-process comparisons: XLA keeps helper threads even with its Eigen
    # pool single-threaded (a transposed dot used 1.5 cores), so with --threads 1 the whole
    # process is pinned while P1-P4 run; the fresh processes later get every core again.
    all_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if args.threads == 1 and all_cpus:
        os.sched_setaffinity(0, {max(all_cpus)})
    all_results = run_programs(names, keys, rounds, block_s, warmup, log)
    report += ["## P1–P3: ratio to plain torch eager (lower is faster)", ""]
    report += program_tables(all_results)
    overhead = []
    if not args.no_overhead:
        overhead = ["## Dispatcher per-op overhead", "",
                    "One op on (8, 16) float32 values, plain tensors vs `nx.named` values "
                    "(outside xmap), interleaved, medians.", ""]
        overhead += run_overhead(max(3, rounds // 2), block_s / 2, log)
    report += p3_per_op(all_results)
    report += overhead

    if not args.no_p4 and (keys is None or {"compile", "nx.jit"} & keys):
        report += ["## P4: trace + compile time", ""]
        report += run_p4(1 if args.quick else 3, log)

    if all_cpus:
        os.sched_setaffinity(0, all_cpus)

    if not args.no_startup and not args.quick:
        import bench_startup
        report += bench_startup.main(log)

    if not args.no_parallel and not args.quick:
        report += run_parallel(log)
        # examples/gpt_mesh.py on a 2x2 mesh vs one process and a hand-written DTensor TP
        report += run_script(log, "bench_sharded", "Sharded training")
        report += run_script(log, "bench_moves", "Collectives along a split axis")
        report += run_script(log, "bench_mesh_overhead", "Per-call overhead of a mesh call")

    report += [
        "## Method", "",
        "One process. Each variant is built, run once and checked (`allclose`) against plain "
        "torch eager before it is timed; a variant whose library piece is missing is `n/a`. "
        "Every variant is warmed up and calibrated to a block of calls of about "
        f"{block_s * 1e3:.0f} ms; then, for {rounds} rounds, each variant runs one block, "
        "in a fresh random order per round (GC off inside a round). Per round the ratio "
        "to torch eager is taken; tables show the median of those paired ratios and the "
        "median per-call time. torch.compile compiles the loss (forward) and gets its "
        "backward from AOT autograd; `nx.jit` traces value_and_grad of the named program "
        "into one graph. JAX runs on CPU in the same process (`block_until_ready`); "
        "with `--threads 1` XLA's Eigen pool is single-threaded too and the process is pinned "
        "to one CPU while P1–P4 run (XLA's other threads would otherwise use a second core: "
        "measured 1.5 cores on a transposed dot). On a shared, "
        "loaded machine use `--threads 1`: with 2 threads torch's OpenMP barriers stall "
        "for milliseconds whenever another process holds a core.",
        "",
        f"Total wall time: {time.perf_counter() - t_start:.0f} s.",
        "",
    ]
    text = "\n".join(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        log(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
