"""The program store (``transforms/_store.py``) against eager, on generated programs.

Each generated program the library accepts runs eagerly, then under
``nx.jit(backend='inductor')`` with a program store (compiled as usual; saved at the
flush), then under a fresh ``nx.jit`` that loads the stored library without tracing.
Both jitted runs must match eager: a stored program is exactly what tracing compiles,
or it is not stored.  ``NX_STORE_N`` / ``NX_STORE_SEED`` pick the corpus (``make
fuzz-store`` runs larger ones); the fixed default runs in ``make test``.
"""
import os
import sys

import pytest

import named_axes as nx
from named_axes.transforms import _store

# The oracle modules import each other by bare name (``import dsl``), see test_oracle.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import oracle_programs as programs  # noqa: E402
import torch_interp  # noqa: E402

pytestmark = pytest.mark.hunt   # minutes on 2 cores: make test-all runs it

N = int(os.environ.get("NX_STORE_N", "12"))
SEED = int(os.environ.get("NX_STORE_SEED", "7"))


@pytest.mark.skipif(not _store.available(), reason="torch without AOTInductor")
@pytest.mark.timeout(0)
def test_stored_programs_match_eager(tmp_path):
    corpus = programs.generate(N, SEED)
    eager = {p["id"]: torch_interp.run(p) for p in corpus}
    corpus = [p for p in corpus if eager[p["id"]]["status"] == "ok"]
    before = nx.set_program_store(tmp_path)
    try:
        first = {p["id"]: torch_interp.run(p, jit=True, backend="inductor") for p in corpus}
        _store.flush()
        saved = len(list(tmp_path.glob("*.pt2")))
        loaded = _store.totals["loaded"]
        second = {p["id"]: torch_interp.run(p, jit=True, backend="inductor") for p in corpus}
        loaded = _store.totals["loaded"] - loaded
    finally:
        nx.set_program_store(before)
    fails = []
    for p in corpus:
        for run, where in ((first, "nx.jit, store filled"), (second, "nx.jit, from the store")):
            fails += [(p["id"], d) for d in compare.vs_vectorized({}, run[p["id"]],
                                                                  eager[p["id"]], where=where)]
    print(f"\nstore hunt (N={N}, seed={SEED}): {len(corpus)} programs accepted, "
          f"{saved} stored, {loaded} calls served from the store")
    assert not fails, "\n".join(f"{pid}: {d}" for pid, d in fails[:20])
    assert saved and loaded >= saved   # the hunt exercised the store
