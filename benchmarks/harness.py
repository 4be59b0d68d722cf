"""Timing harness: interleaved variants, paired ratios, numerical checks.

A *variant* is one way of writing a program (plain torch, torch.compile, named_axes …).
``build()`` returns a zero-argument ``step`` callable that runs the program once and
returns its outputs (finished: JAX results are blocked on), or raises
:class:`NotAvailable` when the library piece it needs does not exist (yet).

Measurement (``measure``):
1. every variant is built, run once, and checked against the reference variant
   (plain torch eager) with ``allclose``; a failed check is reported, not timed;
2. each variant is warmed up and calibrated to run ``n`` calls per block
   (≈ ``block_s`` seconds);
3. for ``rounds`` rounds, every variant runs one block, in a fresh random order each
   round, so machine noise (another process, turbo, GC) hits all variants alike;
   (a variant slower than ``slow_s`` per call runs in the first ``slow_rounds`` only);
4. per round, the ratio ``t_variant / t_reference`` is taken; the reported ratio is the
   median of those paired ratios, the reported time the median per-call time.
"""
from __future__ import annotations

import gc
import random
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


class NotAvailable(Exception):
    """The library piece this variant needs does not exist (yet)."""


@dataclass
class Variant:
    key: str                     # column key, e.g. "eager", "compile", "nx.jit"
    build: Callable[[], Callable[[], Any]]
    rtol: float = 1e-4
    atol: float = 1e-5
    convert: Callable[[Any], Any] | None = None   # applied to the output before checking
    # a known limitation of a peer (e.g. JAX 0.4.30 xmap cannot differentiate logsumexp
    # over a named axis): a failure is reported as n/a with this prefix, not as an error
    known_limit: str = ""


@dataclass
class Result:
    key: str
    status: str = "ok"           # ok | n/a | error | wrong
    note: str = ""
    median_s: float = float("nan")
    ratio: float = float("nan")
    ratio_q1: float = float("nan")
    ratio_q3: float = float("nan")
    n_per_block: int = 0
    rounds: int = 0
    max_err: float = 0.0
    times: list = field(default_factory=list)


def to_numpy(x: Any) -> list:
    """Flatten a (nested) output into a list of float64 numpy arrays."""
    out: list = []

    def rec(v):
        if isinstance(v, (list, tuple)):
            for e in v:
                rec(e)
            return
        if isinstance(v, dict):
            for k in sorted(v):
                rec(v[k])
            return
        if hasattr(v, "detach"):            # torch
            v = v.detach().cpu().numpy()
        out.append(np.asarray(v, dtype=np.float64))

    rec(x)
    return out


def check(ref: list, got: list, rtol: float, atol: float) -> float:
    """Max abs error; raises AssertionError with details when not allclose."""
    if len(ref) != len(got):
        raise AssertionError(f"{len(got)} outputs, expected {len(ref)}")
    worst = 0.0
    for i, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape:
            raise AssertionError(f"output {i}: shape {g.shape}, expected {r.shape}")
        err = float(np.max(np.abs(r - g))) if r.size else 0.0
        worst = max(worst, err)
        if not np.allclose(g, r, rtol=rtol, atol=atol):
            raise AssertionError(f"output {i}: max abs error {err:.3g} (rtol={rtol}, atol={atol})")
    return worst


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(e).__name__}: {first}"


def _block(step: Callable, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n


def measure(variants: list[Variant], *, rounds: int, block_s: float, warmup: int = 3,
            reference: str = "eager", verbose: bool = True, seed: int = 0,
            slow_s: float = 2.0, slow_rounds: int = 5) -> dict[str, Result]:
    """Build, check and time ``variants`` interleaved; see the module docstring."""
    results: dict[str, Result] = {}
    steps: dict[str, Callable] = {}
    ref_out = None
    for v in variants:
        r = results[v.key] = Result(v.key)
        try:
            step = v.build()
            out = step()
            out = to_numpy(v.convert(out) if v.convert else out)
        except NotAvailable as e:
            r.status, r.note = "n/a", str(e) or "not available"
            continue
        except Exception as e:  # a crash in a variant must not stop the suite
            if v.known_limit:
                r.status, r.note = "n/a", f"{v.known_limit}: {_short(e)}"
                continue
            r.status, r.note = "error", _short(e)
            if verbose:
                traceback.print_exc()
            continue
        if v.key == reference:
            ref_out = out
        else:
            if ref_out is None:
                r.status, r.note = "error", f"reference variant {reference!r} failed; not checked"
                continue
            try:
                r.max_err = check(ref_out, out, v.rtol, v.atol)
            except AssertionError as e:
                r.status, r.note = "wrong", f"numerical check failed: {e}"
                continue
        steps[v.key] = step
    if reference not in steps:
        return results

    # warm up + calibrate
    for key, step in list(steps.items()):
        try:
            for _ in range(warmup):
                step()
            t = _block(step, 1)
            n = 1
            while t * n < block_s and n < 100_000:
                n = max(n * 2, int(block_s / max(t, 1e-9)) // 2 or 1)
                t = _block(step, n)
            results[key].n_per_block = max(1, int(round(block_s / max(t, 1e-9))))
        except Exception as e:
            results[key].status, results[key].note = "error", _short(e)
            del steps[key]

    slow = {k for k in steps if k != reference and results[k].n_per_block == 1
            and _block(steps[k], 1) > slow_s}
    rng = random.Random(seed)
    keys = list(steps)
    per_round: list[dict[str, float]] = []
    gc_was = gc.isenabled()
    try:
        for _ in range(rounds):
            rng.shuffle(keys)
            gc.collect()
            gc.disable()
            row = {}
            for key in keys:
                if key in slow and len(per_round) >= slow_rounds:
                    continue  # a very slow variant is timed in the first few rounds only
                row[key] = _block(steps[key], results[key].n_per_block)
            gc.enable()
            per_round.append(row)
    finally:
        if gc_was:
            gc.enable()

    for key in steps:
        r = results[key]
        ts = [row[key] for row in per_round if key in row]
        ratios = sorted(row[key] / row[reference] for row in per_round if key in row)
        r.times = ts
        r.rounds = len(ts)
        r.median_s = statistics.median(ts)
        r.ratio = statistics.median(ratios)
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        r.ratio_q1, r.ratio_q3 = q[0], q[2]
    return results


def fmt_time(s: float) -> str:
    if s != s:  # nan
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs" if s >= 1e-5 else f"{s * 1e6:.2f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms" if s < 1e-2 else f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_cell(r: Result | None) -> str:
    if r is None:
        return "–"
    if r.status == "ok":
        if r.key == "eager":
            return f"1.0 ({fmt_time(r.median_s)})"
        return f"{r.ratio:.2f} ({fmt_time(r.median_s)})"
    return {"n/a": "n/a", "error": "error", "wrong": "WRONG"}[r.status]
