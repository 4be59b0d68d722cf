"""Property-based tests: random axis specs, named shapes, op chains and collectives.

Each property is checked against an independent reference written with plain torch:
``xmap(identity)`` must equal a ``permute`` computed from the specs by hand; a chain of
torch ops on NamedTensors must equal the same chain run once per index of every named
axis (a Python loop); a collective must equal the pmap-style loop over the axis.

Profiles (registered here, applied per test so other modules are unaffected):
``nx-ci`` — derandomized (fixed seed), bounded examples, for ``make test``;
``fuzz`` — many random examples, for ``make fuzz`` (``NX_HYPOTHESIS_PROFILE=fuzz``).
Shrunk failures are kept below as explicit ``@example`` regression cases.
"""
from __future__ import annotations

import itertools
import os

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import named_axes as nx  # noqa: E402

settings.register_profile(
    "nx-ci", derandomize=True, max_examples=30, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True)
settings.register_profile(
    "fuzz", max_examples=1500, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True)
PROFILE = settings.get_profile(os.environ.get("NX_HYPOTHESIS_PROFILE", "nx-ci"))

NAMES = ("a", "b", "c", "d")


# -- strategies ------------------------------------------------------------------------

def _spec(kind: str, positions: list, names: list, ndim: int):
    """Spell the mapping {positions[j]: names[j]} in form ``kind`` (list forms: leading only)."""
    if kind == "dict":
        return dict(zip(positions, names))
    if kind == "negdict":
        return {p - ndim: n for p, n in zip(positions, names)}
    if kind == "list":
        return list(names) + [...]
    if kind == "tuple":
        return tuple(names) + (...,)
    if kind == "str":
        return " ".join(names) + " ..."
    if kind == "str_bare":
        return " ".join(names)
    raise AssertionError(kind)


@st.composite
def transposes(draw):
    """An input shape, an in_axes mapping and an out_axes mapping for xmap(identity)."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    k = draw(st.integers(0, ndim))
    names = draw(st.permutations(NAMES))[:k]
    in_kind = draw(st.sampled_from(["dict", "negdict", "list", "tuple", "str", "str_bare"]))
    if in_kind in ("dict", "negdict"):
        in_pos = sorted(draw(st.permutations(range(ndim)))[:k])
    else:
        in_pos = list(range(k))
    out_kind = draw(st.sampled_from(["dict", "negdict", "list", "tuple", "str"]))
    out_names = list(draw(st.permutations(names)))
    if out_kind in ("dict", "negdict"):
        out_pos = list(draw(st.permutations(range(ndim)))[:k])
    else:
        out_pos = list(range(k))
    return (shape, _spec(in_kind, in_pos, list(names), ndim), dict(zip(names, in_pos)),
            _spec(out_kind, out_pos, out_names, ndim), dict(zip(out_names, out_pos)))


def _reference_transpose(x: torch.Tensor, in_pos: dict, out_pos: dict) -> torch.Tensor:
    """Where each output dim comes from, worked out by hand: a plain ``permute``."""
    rest = [d for d in range(x.dim()) if d not in in_pos.values()]
    src = [None] * x.dim()
    for name, p in out_pos.items():
        src[p] = in_pos[name]
    it = iter(rest)
    perm = [s if s is not None else next(it) for s in src]
    return x.permute(perm)


# -- 1. xmap(identity) is the plain-torch permutation -----------------------------------

@PROFILE
@given(transposes())
@example(((2, 3), {-1: 'a'}, {'a': 1}, {0: 'a'}, {'a': 0}))        # negative in position
@example(((1, 2, 3), 'a b', {'a': 0, 'b': 1}, {-1: 'b', -3: 'a'},  # bare string, neg out
          {'b': 2, 'a': 0}))
@example(((2,), {}, {}, [...], {}))                                 # names nothing
def test_xmap_identity_is_a_permutation(case):
    shape, in_axes, in_pos, out_axes, out_pos = case
    x = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    out = nx.xmap(lambda v: v, in_axes=in_axes, out_axes=out_axes)(x)
    ref = _reference_transpose(x, in_pos, out_pos)
    assert isinstance(out, torch.Tensor) and not isinstance(out, nx.NamedTensor)
    assert out.shape == ref.shape
    assert torch.equal(out, ref)


@PROFILE
@given(transposes())
def test_named_then_positional_round_trips(case):
    shape, in_axes, in_pos, out_axes, out_pos = case
    x = torch.randn(shape)
    nt = nx.named(x, in_axes)
    assert nt.named_shape == {n: shape[p] for n, p in in_pos.items()}
    assert tuple(nt.shape) == tuple(s for d, s in enumerate(shape) if d not in in_pos.values())
    assert torch.equal(nx.positional(nt, out_axes), _reference_transpose(x, in_pos, out_pos))


# -- 2. random chains of torch ops vs the per-index loop --------------------------------

W = torch.linspace(-1, 1, 16, dtype=torch.float64).reshape(4, 4)
UNARY = {
    "sin": torch.sin,
    "affine": lambda t: t * 2.0 - 1.0,
    "relu": torch.relu,
    "tanh": lambda t: t.tanh(),
    "softmax-1": lambda t: t.softmax(-1),
    "log_softmax0": lambda t: torch.log_softmax(t, 0),
    "cumsum": lambda t: t.cumsum(-1),
    "flip": lambda t: t.flip(0),
    "center": lambda t: t - t.mean(-1, keepdim=True),
    "colsum": lambda t: t + t.sum(0, keepdim=True),
    "matmul": lambda t: t @ W,
    "mm_fn": lambda t: torch.matmul(t, W.T),
    "where": lambda t: torch.where(t > 0, t, 0.5 * t),
    "clamp": lambda t: torch.clamp(t, -0.5, 0.5),
    "tr_reshape": lambda t: t.transpose(0, 1).reshape(3, 4),
    "l1norm": lambda t: t / (t.abs().sum(-1, keepdim=True) + 1.0),
    "norm": lambda t: t / (t.norm(dim=-1, keepdim=True) + 1.0),
    "vnorm": lambda t: t / (torch.linalg.vector_norm(t, dim=-1, keepdim=True) + 1.0),
}
BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": torch.maximum,
    "rsub": lambda a, b: 1.0 - a + b,
    "bmm": lambda a, b: a @ b.transpose(0, 1) @ a,
}
POS = (3, 4)


@st.composite
def named_operands(draw):
    """Two named shapes over a shared size table, plus an op chain."""
    sizes = {n: draw(st.integers(1, 3)) for n in NAMES[:3]}
    xn = list(draw(st.permutations(NAMES[:3])))[:draw(st.integers(0, 3))]
    yn = list(draw(st.permutations(NAMES[:3])))[:draw(st.integers(0, 2))]
    steps = draw(st.lists(st.one_of(
        st.tuples(st.just("u"), st.sampled_from(sorted(UNARY))),
        st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)))), min_size=1, max_size=5))
    reduce = draw(st.sampled_from([None, "sum", "mean", "amax"]))
    return sizes, xn, yn, steps, reduce


@pytest.mark.parametrize("norm", [lambda t: t.norm(dim=-1, keepdim=True),
                                  lambda t: torch.linalg.vector_norm(t, dim=-1, keepdim=True)])
def test_regression_norm_with_dim_keyword(norm):
    # Shrunk from test_op_chain_matches_per_index_loop: ('u', 'norm') / ('u', 'vnorm').
    xd = torch.randn(2, 3, 4, dtype=torch.float64)
    out = norm(nx.named(xd, 'a ...'))
    ref = torch.stack([norm(xd[i]) for i in range(2)])
    torch.testing.assert_close(nx.positional(out, 'a ...'), ref)


def _run_chain(x, y, steps):
    for kind, key in steps:
        x = UNARY[key](x) if kind == "u" else BINARY[key](x, y)
    return x


def _loop_reference(xd, xn, yd, yn, steps, sizes):
    """Run the chain once per index of every named axis (union, in NAMES order)."""
    union = [n for n in NAMES if n in xn or n in yn]
    if not union:
        return _run_chain(xd, yd, steps), union
    outs = []
    for idx in itertools.product(*[range(sizes[n]) for n in union]):
        at = dict(zip(union, idx))
        xi = xd[tuple(at[n] for n in xn)] if xn else xd
        yi = yd[tuple(at[n] for n in yn)] if yn else yd
        outs.append(_run_chain(xi, yi, steps))
    out = torch.stack(outs)
    return out.reshape([sizes[n] for n in union] + list(out.shape[1:])), union


@PROFILE
@given(named_operands())
@example(({'a': 2, 'b': 3, 'c': 1}, ['b', 'a'], ['a'], [("b", "bmm")], None))
@example(({'a': 2, 'b': 1, 'c': 2}, [], ['c'], [("u", "softmax-1"), ("b", "add")], "sum"))
def test_op_chain_matches_per_index_loop(case):
    sizes, xn, yn, steps, reduce = case
    g = torch.Generator().manual_seed(0)
    xd = torch.randn([sizes[n] for n in xn] + list(POS), generator=g, dtype=torch.float64)
    yd = torch.randn([sizes[n] for n in yn] + list(POS), generator=g, dtype=torch.float64)
    x = nx.named(xd, list(xn) + [...])
    y = nx.named(yd, list(yn) + [...])
    out = _run_chain(x, y, steps)
    ref, union = _loop_reference(xd, xn, yd, yn, steps, sizes)
    if union and reduce:
        out = getattr(nx, reduce)(out, dim=union[0])
        ref = getattr(torch, reduce)(ref, dim=0)
        union = union[1:]
    if isinstance(out, nx.NamedTensor):
        assert out.named_shape == {n: sizes[n] for n in union}
        out = nx.positional(out, list(union) + [...])
    else:
        assert not union
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref)


@PROFILE
@given(named_operands())
def test_op_chain_inside_xmap_matches_loop(case):
    """The same property through xmap's own in_axes/out_axes, names all leading."""
    sizes, xn, yn, steps, _ = case
    g = torch.Generator().manual_seed(1)
    xd = torch.randn([sizes[n] for n in xn] + list(POS), generator=g, dtype=torch.float64)
    yd = torch.randn([sizes[n] for n in yn] + list(POS), generator=g, dtype=torch.float64)
    ref, union = _loop_reference(xd, xn, yd, yn, steps, sizes)
    f = nx.xmap(lambda a, b: _run_chain(a, b, steps),
                in_axes=(list(xn) + [...], list(yn) + [...]), out_axes=list(union) + [...])
    torch.testing.assert_close(f(xd, yd), ref)


# -- 3. collectives vs the pmap-style loop ----------------------------------------------

def _lax(*needs):
    """``named_axes.lax``, skipping until it and the collectives ``needs`` exist."""
    lax = pytest.importorskip("named_axes.lax")
    missing = [n for n in needs if not hasattr(lax, n)]
    if missing:
        pytest.skip(f"nx.lax lacks {missing} so far")
    return lax


@st.composite
def collective_cases(draw):
    sizes = {n: draw(st.integers(1, 3)) for n in NAMES[:3]}
    names = list(draw(st.permutations(NAMES[:3])))[:draw(st.integers(1, 3))]
    over = tuple(draw(st.permutations(names))[:draw(st.integers(1, len(names)))])
    op = draw(st.sampled_from(["psum", "pmean", "pmax", "pmin"]))
    as_tuple = draw(st.booleans()) or len(over) > 1
    return sizes, names, over, op, as_tuple


@PROFILE
@given(collective_cases())
@example(({'a': 2, 'b': 3, 'c': 1}, ['a', 'b'], ('b',), "psum", False))
def test_reducing_collectives_match_pmap_loop(case):
    lax = _lax("psum", "pmean", "pmax", "pmin")
    sizes, names, over, op, as_tuple = case
    xd = torch.randn([sizes[n] for n in names] + [4], dtype=torch.float64)
    axis = over if as_tuple else over[0]
    f = nx.xmap(lambda v: getattr(lax, op)(v, axis), in_axes=list(names) + [...],
                out_axes=[n for n in names if n not in over] + [...])
    # pmap-style reference: every device holds xd at its index; the collective combines
    # the values of all devices that differ only along the axes in `over`.
    kept = [n for n in names if n not in over]
    ref = torch.empty([sizes[n] for n in kept] + [4], dtype=torch.float64)
    for kidx in itertools.product(*[range(sizes[n]) for n in kept]):
        at = dict(zip(kept, kidx))
        vals = []
        for oidx in itertools.product(*[range(sizes[n]) for n in over]):
            at.update(zip(over, oidx))
            vals.append(xd[tuple(at[n] for n in names)])
        stacked = torch.stack(vals)
        red = {"psum": stacked.sum(0), "pmean": stacked.mean(0),
               "pmax": stacked.amax(0), "pmin": stacked.amin(0)}[op]
        ref[kidx] = red
    torch.testing.assert_close(f(xd), ref)


@PROFILE
@given(st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_ppermute_and_axis_index_match_loop(n, shift, gather):
    lax = _lax("ppermute", "axis_index", "all_gather")
    xd = torch.randn(n, 3, dtype=torch.float64)
    perm = [(i, (i + shift) % n) for i in range(n)]

    def body(v):
        moved = lax.ppermute(v, 'i', perm)
        idx = lax.axis_index('i')
        out = moved * 10.0 + idx
        return lax.all_gather(out, 'i') if gather else out

    f = nx.xmap(body, in_axes=['i', ...], out_axes=[...] if gather else ['i', ...])
    ref = torch.empty_like(xd)
    for src, dst in perm:              # device dst receives the value of device src
        ref[dst] = xd[src] * 10.0 + dst
    torch.testing.assert_close(f(xd), ref)


@PROFILE
@given(st.integers(1, 4))
def test_psum_of_one_is_the_axis_size(n):
    lax = _lax("psum")
    f = nx.xmap(lambda v: v * 0 + lax.psum(1, 'i'), in_axes=['i', ...], out_axes=['i', ...])
    assert torch.equal(f(torch.zeros(n, 2)), torch.full((n, 2), float(n)))


# -- 4. resources never change results, and never alias the caller's inputs ------------

@PROFILE
@given(st.sampled_from([1, 2, 3, 6]), st.booleans())
@example(2, False)   # shrunk: once a silent per-chunk sum, now a clear error
def test_serial_loop_plain_reduction_is_exact_or_refused(chunks, donate):
    """A plain named reduction over a loop axis can't see other chunks: it must be right
    (one chunk) or refused with a clear error pointing at lax.psum - never a per-chunk sum."""
    if not hasattr(nx, "SerialLoop"):
        pytest.skip("nx.SerialLoop not built yet")
    xd = torch.randn(6, 4, dtype=torch.float64)
    keep = xd.clone()

    def body(v):
        return (v * 2).softmax(-1) + nx.sum(v, 'i')

    plain = nx.xmap(body, in_axes=['i', ...], out_axes=['i', ...])(xd)
    looped = nx.xmap(body, in_axes=['i', ...], out_axes=['i', ...],
                     axis_resources={'i': nx.SerialLoop(chunks)},
                     donate_argnums=(0,) if donate else ())
    if chunks > 1:
        with pytest.raises(ValueError, match=r"axis 'i'.*SerialLoop.*psum"):
            looped(xd)
        assert torch.equal(xd, keep), "the caller's input changed"
        return
    out = looped(xd)
    torch.testing.assert_close(out, plain)
    assert torch.equal(xd, keep), "the caller's input changed"
    out.add_(1.0)   # writing the result must not write through to the input
    assert torch.equal(xd, keep), "the result aliases the caller's input"


@PROFILE
@given(st.sampled_from([1, 2, 3, 6]), st.booleans())
def test_serial_loop_psum_equals_unmapped_and_leaves_inputs_alone(chunks, donate):
    """As above with the collective spelling of the reduction, which the engine handles."""
    lax = _lax("psum")
    xd = torch.randn(6, 4, dtype=torch.float64)
    keep = xd.clone()

    def body(v):
        return (v * 2).softmax(-1) + lax.psum(v, 'i')

    plain = nx.xmap(body, in_axes=['i', ...], out_axes=['i', ...])(xd)
    looped = nx.xmap(body, in_axes=['i', ...], out_axes=['i', ...],
                     axis_resources={'i': nx.SerialLoop(chunks)},
                     donate_argnums=(0,) if donate else ())(xd)
    torch.testing.assert_close(looped, plain)
    assert torch.equal(xd, keep), "the caller's input changed"
    looped.add_(1.0)
    assert torch.equal(xd, keep), "the result aliases the caller's input"
