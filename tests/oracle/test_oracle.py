"""Differential oracle: generated named programs under JAX 0.4.30's xmap vs named_axes.

``NX_ORACLE_JAX_PYTHON`` (required; set by ``make test-oracle``) is the python of a
``jax==0.4.30`` env; ``NX_ORACLE_N`` (default 2000) and ``NX_ORACLE_SEED`` (default 0)
pick the corpus.  One session-wide run (``harness.run_corpus``) feeds the tests; each
test fails on failures that match no class in ``known.KNOWN_CLASSES`` and reports the
known ones by class.
"""
import collections
import os
import sys

import pytest

if not os.environ.get("NX_ORACLE_JAX_PYTHON"):
    pytest.skip("NX_ORACLE_JAX_PYTHON is not set (make test-oracle sets it)",
                allow_module_level=True)

# The oracle modules import each other by bare name (``import dsl``), as the JAX runner
# (a script run under .venv-jax) does.  (No conftest.py here: pytest would import it as
# ``conftest`` and shadow tests/conftest.py, which other test modules import by name.)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import known  # noqa: E402

N = int(os.environ.get("NX_ORACLE_N", "2000"))
SEED = int(os.environ.get("NX_ORACLE_SEED", "0"))


@pytest.fixture(scope="module")
def outcome(request):
    out = harness.run_corpus(N, SEED, os.environ["NX_ORACLE_JAX_PYTHON"])
    by_class = collections.Counter()
    progs_by_class = collections.defaultdict(set)
    for prog, d in out.fails:
        if d.kind in INFO:
            continue
        c = known.classify(prog, d) or "UNKNOWN"
        by_class[c] += 1
        progs_by_class[c].add(prog["id"])
    lines = [f"corpus: {len(out.corpus)} programs (seed {SEED}); "
             + ", ".join(f"{k} {v:.1f}s" for k, v in out.seconds.items()),
             "JAX: " + ", ".join(f"{k} {v}" for k, v in sorted(collections.Counter(
                 r["status"] for r in out.jax["results"].values()).items()))
             + "; resource runs: " + ", ".join(f"{k} {v}" for k, v in sorted(out.runs.items()))]
    for c in list(known.KNOWN_CLASSES) + ["UNKNOWN"]:
        lines.append(f"  {c}: {len(progs_by_class[c])} programs ({by_class[c]} differences)")
    info = [d for _, d in out.fails if d.kind in INFO]
    lines.append(f"  (informational, not failures: {len(info)} outputs whose named shape inside "
                 f"the xmap differs from JAX's aval while values and shapes agree)")
    request.config._nx_oracle_report = lines
    return out


# Named shapes inside the xmap are not part of the contract's comparison (values,
# positional shapes, dtype kind, accepted/rejected): JAX's aval named_shape is reported.
INFO = {"named_shape"}


def _unknown(out, pred):
    bad = [(p, d) for p, d in out.fails
           if pred(d) and d.kind not in INFO and known.classify(p, d) is None]
    if not bad:
        return
    kinds = collections.Counter(d.kind for _, d in bad)
    shown = "\n\n".join(f"[{p['id']} {p['cat']}] {d.where}: {d.kind}: {d.msg}\n  body={p['body']}"
                        f"\n  in_axes={p['in_axes']}\n  out_axes={p['out_axes']}"
                        for p, d in bad[:8])
    pytest.fail(f"{len(bad)} unexplained differences {dict(kinds)}; first ones:\n{shown}",
                pytrace=False)


def test_corpus_size(outcome):
    assert len(outcome.corpus) >= min(N, 2000)
    assert sum(r["status"] == "ok" for r in outcome.jax["results"].values()) > len(outcome.corpus) // 2


def test_named_axes_agrees_with_jax(outcome):
    _unknown(outcome, lambda d: d.where == "vectorized")


def test_resources_agree_with_vectorized(outcome):
    _unknown(outcome, lambda d: d.where != "vectorized")
