"""Judging one program: named_axes against JAX, and resource runs against vectorized.

:func:`vs_jax` and :func:`vs_vectorized` return a list of :class:`Diff` (empty when the
runs agree).  A ``Diff`` has a ``kind`` (what differs, e.g. ``"values"``,
``"accepts_jax_rejects"``) and a human message; ``known.classify`` maps it to a known bug
class or to ``None`` (a new failure).

What counts as agreement (never loosened to make a program pass):

- both reject (named_axes with a ``NamedAxisError`` subclass; a raw torch/Python error is
  a ``raw_error`` diff even where JAX rejects too), or both accept and
- the same number of outputs, equal positional shapes, the same dtype kind (int / float /
  bool), the same named shape inside the xmap where both sides report one, and values
  equal: exactly for ints, ``allclose(rtol=1e-4, atol=1e-5 * max(1, max|expected|))``
  for float32.
- A resource run (``SerialLoop``, one-device mesh) must give the vectorized run's outputs
  (same test) or raise a ``NamedAxisError``; when the vectorized run rejects it must
  reject too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RTOL, ATOL = 1e-4, 1e-5


@dataclass
class Diff:
    kind: str
    msg: str
    where: str = "vectorized"      # or the resources, spelled


def kind_of(dtype) -> str:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "bool"
    return "int" if np.issubdtype(dt, np.integer) else "float"


def _outs_diff(got: list, want: list, where: str) -> list:
    if len(got) != len(want):
        return [Diff("n_outputs", f"{len(got)} outputs, expected {len(want)}", where)]
    diffs = []
    for j, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            diffs.append(Diff("shape", f"output {j}: shape {tuple(g.shape)}, expected "
                                       f"{tuple(w.shape)}", where))
            continue
        if kind_of(g.dtype) != kind_of(w.dtype):
            diffs.append(Diff("dtype_kind", f"output {j}: dtype {g.dtype}, expected "
                                            f"{w.dtype}", where))
            continue
        if kind_of(w.dtype) == "float":
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            scale = max(1.0, float(np.max(np.abs(w64), initial=0.0)))
            ok = np.allclose(g64, w64, rtol=RTOL, atol=ATOL * scale, equal_nan=True)
        else:
            ok = np.array_equal(g.astype(np.int64), w.astype(np.int64))
        if not ok:
            err = np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)), initial=0.0)
            diffs.append(Diff("values", f"output {j}: max abs error {err:.3g}\n got "
                                        f"{np.array2string(g, threshold=24)}\n want "
                                        f"{np.array2string(w, threshold=24)}", where))
    return diffs


def vs_jax(prog: dict, jres: dict, jarrays, tres: dict) -> list:
    """named_axes's vectorized run ``tres`` against JAX's result ``jres``."""
    if tres["status"] == "rejected" and not tres["named_axis_error"]:
        return [Diff("raw_error", f"{tres['exc']}: {tres['msg']} (JAX: {jres['status']}"
                                  f"{' ' + jres.get('exc', '') if jres['status'] != 'ok' else ''})")]
    if jres["status"] == "rejected":
        if tres["status"] == "ok":
            return [Diff("accepts_jax_rejects", f"JAX raised {jres['exc']}: {jres['msg']}")]
        return []
    if tres["status"] == "rejected":
        return [Diff("rejects_jax_accepts", f"{tres['exc']}: {tres['msg']}")]
    want = [jarrays[f"{prog['id']}__{j}"] for j in range(len(jres["outs"]))]
    diffs = _outs_diff(tres["outs"], want, "vectorized")
    for j, (jo, tn) in enumerate(zip(jres["outs"], tres["named"])):
        jn = jo.get("named")
        if jn is not None and tn is not None and jn != tn and not diffs:
            diffs.append(Diff("named_shape", f"output {j}: named shape {tn} inside the xmap, "
                                             f"JAX has {jn}"))
    return diffs


def vs_vectorized(res: dict, rres: dict, vres: dict, where: str | None = None) -> list:
    """A run with axis_resources ``res`` (result ``rres``) against the vectorized ``vres``
    (``where``: how the run differs, when not by its resources)."""
    where = where or "axis_resources=" + ", ".join(
        f"{n}: {'SerialLoop(%d)' % r[1] if isinstance(r, list) else repr(r)}"
        for n, r in res.items())
    if rres["status"] == "rejected":
        if rres["named_axis_error"]:
            return []
        return [Diff("resources_raw_error", f"{rres['exc']}: {rres['msg']}", where)]
    if vres["status"] == "rejected":
        return [Diff("resources_accepts", "accepted a program the vectorized run rejects "
                                          f"({vres['exc']})", where)]
    return [Diff("resources_" + d.kind, d.msg, where)
            for d in _outs_diff(rres["outs"], vres["outs"], where)]


def vs_other_data(ores: dict, vres: dict) -> list:
    """The same program run on other data (``ores``: every float input filled with one
    value) against the vectorized run ``vres``: a named shape is a function of the
    program, so the decision and every output's named shape must be the same."""
    where = "other data"
    if (ores["status"] == "rejected") != (vres["status"] == "rejected"):
        run = ores if ores["status"] == "rejected" else vres
        return [Diff("data_decides", f"{'rejected' if run is ores else 'accepted'} on other "
                                     f"data: {run.get('exc', '')} {run.get('msg', '')}", where)]
    if ores["status"] == "ok" and ores["named"] != vres["named"]:
        return [Diff("data_named_shape", f"named shapes {ores['named']} on other data, "
                                         f"{vres['named']} on the corpus's", where)]
    return []
