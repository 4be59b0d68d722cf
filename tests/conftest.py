"""Shared test helpers: random named operands and the loop-over-named-indices reference.

The reference for every op on NamedTensors is the op run once per index of every
named axis on plain tensors (SPEC §1, vmap semantics).  ``check_op`` builds random
named operands (random sizes, random physical orders, some operands lacking some
names, plain tensors left plain), runs the op both ways and compares.
"""
from __future__ import annotations

import itertools
import os
import random
from typing import Any, Callable, Sequence

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

# every fold of a gradient's copies checks the copies it drops (transforms/_instances)
os.environ.setdefault("NAMED_AXES_CHECK_FOLDS", "1")

import named_axes as nx  # noqa: E402
from named_axes._tensor import NamedTensor

POOL = ("a", "b", "c")


def seed_of(key: str) -> int:
    """A stable seed per test id (str hash is salted per process)."""
    return sum((i + 1) * ord(ch) for i, ch in enumerate(key)) % (2**31)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test starts with dynamo's caches empty: every torch.compile of an xmap object
    compiles the same wrapper frame, whose cache entries would otherwise add up over the
    tests a pytest-xdist worker happens to run, to dynamo's recompile limit."""
    torch.compiler.reset()
    yield


@pytest.fixture(autouse=True)
def _seeded_torch(request):
    """Each test draws the same torch random numbers however pytest-xdist distributes
    the tests (the global generator's state otherwise depends on what ran before)."""
    torch.manual_seed(seed_of(request.node.nodeid))
    random.seed(seed_of(request.node.nodeid))
    yield


def name_it(full: torch.Tensor, names: Sequence, rng: random.Random) -> NamedTensor:
    """``full`` laid out [names..., positional...] -> a NamedTensor whose named dims sit at
    random physical positions (so its physical layout is a random permutation)."""
    k = len(names)
    if k == 0:
        return NamedTensor._wrap(full, ())
    nd = full.dim()
    targets = sorted(rng.sample(range(nd), k))
    rng.shuffle(targets)
    moved = torch.movedim(full, list(range(k)), targets)
    return nx.named(moved, {t: n for t, n in zip(targets, names)})


def plan_names(rng: random.Random, n_named: int, min_axes: int = 1, max_axes: int = 3,
               all_on: Sequence[int] = ()):
    """Pick axes (name -> size) and, per named operand, the names it carries.

    Every chosen axis is carried by at least one operand; operands in ``all_on`` carry
    every axis.
    """
    axes = rng.sample(POOL, rng.randint(min_axes, max_axes))
    sizes = {n: rng.randint(1, 3) for n in axes}
    if all(s == 1 for s in sizes.values()):
        sizes[axes[0]] = 2
    carried = []
    for i in range(n_named):
        if i in all_on:
            own = list(axes)
        else:
            own = [n for n in axes if rng.random() < 0.6]
        rng.shuffle(own)
        carried.append(own)
    for n in axes:
        if not any(n in c for c in carried):
            carried[rng.randrange(n_named)].append(n)
    return sizes, carried


def loop_reference(fn: Callable, fulls: list, carried: list, named_mask: list, U: Sequence,
                   sizes: dict):
    """Run ``fn`` once per index of every axis in ``U`` on plain slices; stack the results
    as a pytree of tensors with leading dims ``U``."""
    outs = []
    for idx in itertools.product(*[range(sizes[n]) for n in U]):
        at = dict(zip(U, idx))
        args = []
        for full, own, is_named in zip(fulls, carried, named_mask):
            if is_named and own:
                args.append(full[tuple(at[n] for n in own)])
            else:
                args.append(full)
        outs.append(fn(*args))
    flat0, spec = tree_flatten(outs[0])
    flats = [tree_flatten(o)[0] for o in outs]
    stacked = []
    for j in range(len(flat0)):
        leaves = [f[j] for f in flats]
        if isinstance(leaves[0], torch.Tensor):
            t = torch.stack(leaves).reshape(tuple(sizes[n] for n in U) + tuple(leaves[0].shape))
            stacked.append(t)
        else:
            stacked.append(leaves)
    return flat0, spec, stacked


def to_plain(out: Any, U: Sequence, *, expect_names: set | None = None):
    """Flatten a (pytree of) NamedTensor results to plain tensors with leading dims ``U``."""
    flat, spec = tree_flatten(out, is_leaf=lambda v: isinstance(v, NamedTensor))
    res = []
    for v in flat:
        if isinstance(v, NamedTensor):
            names = set(v.named_shape)
            want = set(U) if expect_names is None else expect_names
            assert names == want, f"result named_shape {v.named_shape}, expected names {want}"
            res.append(nx.positional(v, list(U) + [...]) if U else v._data)
        else:
            res.append(v)
    return res, spec


def assert_same(got, want, *, rtol=1e-5, atol=1e-6, what=""):
    """Values equal (exactly for non-floats, closely for floats), with equal shapes."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
        assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        if want.is_floating_point() or want.is_complex():
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(got, want), f"{what}: values differ"
    else:
        assert got == want, f"{what}: {got!r} != {want!r}"


def check_op(fn: Callable, inputs: list, *, key: str, named: Sequence[int] | None = None,
             all_on: Sequence[int] = (), min_axes: int = 1, max_axes: int = 3,
             rtol=1e-5, atol=1e-6):
    """Compare ``fn`` on random named versions of ``inputs`` with the named-index loop.

    ``inputs`` are callables ``make(rng_torch, named_sizes_tuple) -> tensor`` giving one
    operand with the given leading named sizes (so domains and dtypes stay per operand);
    ``named`` lists which operands may carry names (default: all).
    """
    rng = random.Random(seed_of(key))
    gen = torch.Generator().manual_seed(seed_of(key))
    named = list(range(len(inputs))) if named is None else list(named)
    sizes, carried_n = plan_names(rng, len(named), min_axes, max_axes,
                                  [named.index(i) for i in all_on])
    carried = [[] for _ in inputs]
    for j, i in enumerate(named):
        carried[i] = carried_n[j]
    fulls = [make(gen, tuple(sizes[n] for n in own)) for make, own in zip(inputs, carried)]
    mask = [i in named for i in range(len(inputs))]
    ops = [name_it(f, own, rng) if m and own else f for f, own, m in zip(fulls, carried, mask)]
    U = [n for n in POOL if n in sizes]
    ref_flat, ref_spec, ref = loop_reference(fn, fulls, carried, mask, U, sizes)
    got = fn(*ops)
    got_flat, got_spec = to_plain(got, U)
    assert len(got_flat) == len(ref_flat), f"{key}: {len(got_flat)} outputs, expected {len(ref_flat)}"
    for j, (g, w) in enumerate(zip(got_flat, ref)):
        if isinstance(w, list):
            continue  # non-tensor leaves (e.g. an int) — per-index values checked elsewhere
        assert_same(g, w, rtol=rtol, atol=atol, what=f"{key} output {j}")
    return got


# -- input makers ---------------------------------------------------------------------

def real(*shape, lo=-2.0, hi=2.0, dtype=torch.float64):
    """Random floats in [lo, hi] away from 0 (sign-sensitive ops stay well-defined)."""
    def make(gen, lead):
        u = torch.rand(lead + shape, generator=gen, dtype=dtype)
        v = lo + (hi - lo) * u
        return torch.where(v.abs() < 0.05, torch.full_like(v, 0.3), v)
    return make


def ints(*shape, lo=1, hi=7, dtype=torch.int64):
    def make(gen, lead):
        return torch.randint(lo, hi, lead + shape, generator=gen, dtype=dtype)
    return make


def bools(*shape):
    def make(gen, lead):
        return torch.rand(lead + shape, generator=gen) < 0.5
    return make


def const(value):
    """A plain operand that must stay unnamed (weights, index tensors)."""
    def make(gen, lead):
        return value
    return make


@pytest.fixture
def bound():
    """Bind axes for a test body: ``with bound({'i': 3}): ...``."""
    from named_axes._env import bind
    return bind


def pytest_terminal_summary(terminalreporter, config):
    """The per-class counts tests/oracle/test_oracle.py left on ``config``."""
    lines = getattr(config, "_nx_oracle_report", None)
    if lines:
        terminalreporter.section("named_axes vs JAX 0.4.30 oracle")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs two workers), tests that start process
    groups run one at a time, on one worker: two 4-rank launches side by side on a
    2-core machine ran into their timeouts.  First, before xdist's own hook reads the
    ``xdist_group`` marks (after it, a module's tests were split over both workers and
    its ranks launched twice)."""
    for item in items:
        if item.get_closest_marker("distributed") is not None:
            item.add_marker(pytest.mark.xdist_group("distributed"))


@pytest.fixture
def dynamo_matmul():
    """The opt-in dynamo fix for ``named @ tensor`` (docs/guide.md §4), undone after."""
    nx.enable_dynamo_matmul()
    yield
    nx.disable_dynamo_matmul()


def run_jax_script(script: str):
    """The JSON that ``script`` prints last, run by JAX 0.4.30's interpreter (the oracle
    env: ``NX_JAX_PYTHON``, ``NX_ORACLE_JAX_PYTHON`` or ``.venv-jax``); skips without one."""
    import json
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for python in (os.environ.get("NX_JAX_PYTHON"), os.environ.get("NX_ORACLE_JAX_PYTHON"),
                   str(root / ".venv-jax" / "bin" / "python")):
        if python and os.path.exists(python):
            break
    else:
        pytest.skip("no JAX environment (set NX_JAX_PYTHON or make .venv-jax/.installed)")
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
