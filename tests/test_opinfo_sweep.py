"""Every op of PyTorch's OpInfo database on named values equals the op looped over the
named indices, or raises a NamedAxisError (issue 29, item 1).

The method is functorch's vmap-vs-for-loop check (pytorch's test/functorch/common_utils.py,
``loop`` and ``get_fallback_and_vmap_exhaustive``) with ``nx.named`` in place of vmap; the
machinery lives in ``opinfo_sweep_lib`` (its docstring has the details).  For every OpInfo
and sample (float32, else the first supported of float64/int64/bool/complex64), a dim of
the sample's tensors is named ``'n'`` in four ways (dim 0 of the main input; its last dim;
dim 0 of every tensor sharing the main input's dim-0 size; the main input plain and
another tensor named), and the op is called as a function, a method, in place, and with
``out=`` (plain, named, named with the wrong size).  Each case must match the loop
(values, shapes, named shape, dtype, views aliasing their input, what in-place writes
leave in the arguments) or raise a NamedAxisError where the loop fails or gives no named
value.  Otherwise it is a *silent mismatch* (this test fails on those) or a *raw error*
(a torch error where ours was due: counted in the report, not failed on).

Modes:

* default (``make test``): the first ``opinfo_sweep_lib.DEFAULT_SAMPLES`` (4) samples of
  every op, about 20-40 s on 2 cores;
* ``NX_OPINFO_FULL=1``: every sample of every op (1-2 min);
* ``NX_OPINFO_REPORT=path``: also write the counts of this run to ``path``;
  ``python tests/test_opinfo_sweep.py --report [--full] [OP ...]`` prints them.

torch.testing._internal imports ``expecttest``; without it this file is skipped.
"""
from __future__ import annotations

import argparse
import os
import sys

import pytest

pytest.importorskip("expecttest", reason="torch.testing._internal (OpInfo) imports expecttest")

import opinfo_sweep_lib as lib  # noqa: E402
from opinfo_sweep_lib import FULL, OPS, SILENT, format_report, sweep  # noqa: E402

# Silent mismatches the full sweep found, op -> root cause; these ops run as
# xfail(strict=False) until the library is fixed.  Shrink it as fixes land; only silent
# mismatches belong here (raw errors do not fail the test).  Empty: none known.
KNOWN_MISMATCH: dict[str, str] = {}

RESULTS: dict = {}


def _param(name: str):
    marks = ()
    if name in KNOWN_MISMATCH:
        marks = pytest.mark.xfail(strict=False, reason=KNOWN_MISMATCH[name])
    return pytest.param(name, id=name, marks=marks)


@pytest.fixture(scope="module", autouse=True)
def _report_file():
    """With NX_OPINFO_REPORT=path, write this run's counts there at the end."""
    yield
    path = os.environ.get("NX_OPINFO_REPORT")
    if path and RESULTS:
        with open(path, "w") as f:
            f.write(format_report(RESULTS) + "\n")


@pytest.mark.parametrize("name", [_param(n) for n in OPS])
def test_op_matches_loop(name):
    """Every case of the op matches the loop or raises a NamedAxisError (raw errors are
    only counted)."""
    RESULTS[name] = outcomes = sweep(name)
    if isinstance(outcomes, str):
        pytest.skip(outcomes)
    silent = [o.line() for o in outcomes if o.outcome == SILENT]
    assert not silent, f"{len(silent)} silent mismatches:\n" + "\n".join(silent)


def test_tables_name_real_ops():
    """Every op named in the tables exists in op_db (a renamed OpInfo would go stale)."""
    named = (set(KNOWN_MISMATCH) | set(lib.SKIP_OPS) | set(lib.SHAPE_ONLY_OPS)
             | set(lib.PLAIN_RESULT_OPS) | set(lib.DROPOUT_OPS) | {op for op, _ in lib.UNBOUND_CALLS})
    assert named <= set(OPS), sorted(named - set(OPS))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Counts of the OpInfo sweep.")
    parser.add_argument("--report", action="store_true", required=True,
                        help="print the counts, skips, silent mismatches and raw errors")
    parser.add_argument("--full", action="store_true", default=FULL,
                        help="every sample (as NX_OPINFO_FULL=1)")
    parser.add_argument("ops", nargs="*", help="only these OpInfo names")
    args = parser.parse_args(argv)
    names = args.ops or list(OPS)
    print(format_report({n: sweep(n, args.full) for n in names}, args.full))


if __name__ == "__main__":
    main(sys.argv[1:])
