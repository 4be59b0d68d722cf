"""A named shape is a function of the program: generated programs give the same named
shapes and values whether their inputs require grad for a graph outside the xmap or not.

Inside ``nx.grad`` / ``nx.vjp`` the tape decides which copies of a differentiated input a
result keeps from which values depend on the input.  With the inputs also requiring grad
outside, ``requires_grad`` no longer told those values apart and the tape kept every
copy (mesh oracle seed 3902, p3902_00448 and p3902_00728: a gradient with named shape
``{'c': 2, 'd': 2}`` where JAX's and the plain call's is ``{}``, both in ``nx.vjp``).
``nx.vjp`` differentiates at its own torch.func level: under no other transform, a value
depends on its inputs iff torch.func wraps it (``Tape.own_level``).
``NX_STATIC_N`` / ``NX_STATIC_SEED`` pick a larger corpus.
"""
import contextlib
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mesh_runs  # noqa: E402
import oracle_programs as programs  # noqa: E402


def _found(seed: int, ids: set) -> list:
    out, k = [], 0
    while len(out) < len(ids):
        p = programs.one(seed, k)
        k += 1
        if p["id"] in ids:
            out.append(p)
    return out


# the two programs the mesh oracle found, then a fixed sample of the corpus
CORPUS = _found(3902, {"p3902_00448", "p3902_00728"}) + programs.generate(int(os.environ.get("NX_STATIC_N", "200")), int(os.environ.get("NX_STATIC_SEED", "11")))


@pytest.mark.parametrize("prog", CORPUS, ids=[p["id"] for p in CORPUS])
def test_named_shapes_do_not_depend_on_outer_requires_grad(prog):
    plain = mesh_runs.run_on(prog, {}, contextlib.nullcontext())
    traced = mesh_runs.run_on(prog, {}, contextlib.nullcontext(), grads=True)
    assert plain["status"] == traced["status"], (plain.get("msg"), traced.get("msg"))
    if plain["status"] != "ok":
        return
    assert plain["named"] == traced["named"]
    for a, b in zip(plain["outs"], traced["outs"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
