"""One rank of the local-shard-path tests (launched by test_parallel_dtensor_local_shards.py).

Each scenario runs a program on the 4 gloo ranks (the DTensor engine's default path: the
body on each rank's own shards) and records its error against the vectorized run in the
same process -- outputs and the inputs' gradients -- and the engine's summary (which path
ran).  Writes ``rank{R}.json`` into argv[1].
"""
from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _ranks import run_rank  # noqa: E402

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402


def mesh_1d():
    return P.Mesh(np.array(P.devices()), ("x",))


def mesh_2d():
    return P.Mesh(np.array(P.devices()).reshape(2, 2), ("x", "y"))


def _leaves(t):
    return list(t) if isinstance(t, (tuple, list)) else [t]


def _max_err(got, want) -> float:
    errs = []
    for g, w in zip(_leaves(got), _leaves(want)):
        if g is None and w is None:
            continue
        g = torch.zeros_like(w) if g is None else g
        w = torch.zeros_like(g) if w is None else w
        if g.shape != w.shape:
            return float("inf")
        both_nan = torch.isnan(g) & torch.isnan(w) if g.is_floating_point() else None
        d = (g.to(torch.complex128) - w.to(torch.complex128)).abs()
        if both_nan is not None:
            d = torch.where(both_nan, torch.zeros_like(d), d)
        errs.append(float(d.max()) if d.numel() else 0.0)
    return max(errs, default=0.0)


def compare(f, in_axes, out_axes, resources, args, mesh, ct_seed=0) -> dict:
    """``f`` xmapped on ``mesh`` against the vectorized run: output and gradient errors
    (gradients of ``sum(out * fixed cotangent)`` by torch.autograd), and the path taken."""
    def run(res, ctx):
        xs = [a.detach().clone().requires_grad_(a.is_floating_point() or a.is_complex())
              for a in args]
        with ctx:
            out = nx.xmap(f, in_axes=in_axes, out_axes=out_axes, axis_resources=res)(*xs)
        outs = _leaves(out)
        g = torch.Generator().manual_seed(ct_seed)
        terms = [(o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)).real.sum()
                 for o in outs if o.requires_grad]
        inputs = [x for x in xs if x.requires_grad]
        grads = torch.autograd.grad(sum(terms), inputs, allow_unused=True) if terms else []
        return [o.detach() for o in outs], grads

    import contextlib

    want_out, want_grad = run({}, contextlib.nullcontext())
    P.comm_summary(reset=True)
    got_out, got_grad = run(resources, mesh)
    s = P.comm_summary()
    return dict(out_err=_max_err(got_out, want_out), grad_err=_max_err(got_grad, want_grad),
                local=s["local_shard_runs"])


def extremes(rank, results):
    # ties spread over the ranks (2 entries each): amax shares the cotangent among every
    # entry attaining the max, wherever it lives
    x = torch.tensor([[3.0, 1.0], [3.0, 0.0], [3.0, 2.0], [1.0, 3.0]]).reshape(8)
    for op in ("pmax", "pmin"):
        f = lambda v, op=op: getattr(nx.lax, op)(torch.round(v), "i") * v  # noqa: E731
        results[f"{op}_ties"] = compare(f, (["i", ...],), ["i", ...], {"i": "x"}, (x,),
                                        mesh_1d())
    # a NaN on one rank: every rank's result is NaN, as amax's
    y = torch.tensor([0.0, 1.0, 2.0, float("nan"), 4.0, 5.0, 6.0, 7.0])
    results["pmax_nan"] = compare(lambda v: nx.lax.pmax(v, "i") + v, (["i", ...],),
                                  ["i", ...], {"i": "x"}, (y,), mesh_1d())
    # max over an axis split over both mesh dims, and over two axes at once
    z = torch.linspace(-2, 2, 8 * 3).reshape(8, 3) ** 2
    results["pmax_two_mesh_dims"] = compare(lambda v: nx.lax.pmax(v, "i") - v, (["i", ...],),
                                            ["i", ...], {"i": ("x", "y")}, (z,), mesh_2d())
    w = torch.linspace(-1, 1, 4 * 2 * 3).reshape(4, 2, 3).sin()
    results["pmin_two_axes"] = compare(lambda v: nx.lax.pmin(v, ("i", "j")) * v,
                                       (["i", "j", ...],), ["i", "j", ...],
                                       {"i": "y", "j": "x"}, (w,), mesh_2d())


def dtypes(rank, results):
    f = lambda v: nx.lax.psum(v, "i")  # noqa: E731
    for name, x in (("int64", torch.arange(8)), ("bool", torch.arange(8) % 3 == 0),
                    ("complex64", torch.arange(8.0).to(torch.complex64) * (1 + 2j))):
        results[f"psum_{name}"] = compare(f, (["i", ...],), [...], {"i": "x"}, (x,), mesh_1d())
    results["pmax_bool"] = compare(lambda v: nx.lax.pmax(v, "i"), (["i", ...],), [...],
                                   {"i": "x"}, (torch.arange(8) == 5,), mesh_1d())


def edges(rank, results):
    # a replicated weight times a sharded batch, an output replicated on every rank
    # (its cotangent is split over the ranks' copies) and one that is sharded
    def f(w, x):
        h = torch.tanh(x * w)
        return nx.lax.pmean(h, "b"), h * 2, w * 3

    w, x = torch.linspace(-1, 1, 3), torch.linspace(-2, 2, 8 * 3).reshape(8, 3)
    results["replicated_and_sharded"] = compare(
        f, ([...], ["b", ...]), ([...], ["b", ...], [...]), {"b": "x"}, (w, x), mesh_2d())
    # two axes on two mesh dims, a psum over one of them, pdot over the other
    def g(a, b):
        return nx.lax.psum(nx.lax.pdot(a, b, "k") * a, "m")

    a = torch.linspace(-1, 1, 4 * 6).reshape(4, 6)
    b = torch.linspace(0, 2, 6)
    results["pdot_psum_2d"] = compare(g, (["m", "k", ...], ["k", ...]), ["k", ...],
                                      {"m": "x", "k": "y"}, (a, b), mesh_2d())
    # axis_index of a split axis: this rank's slice of the indices
    results["axis_index"] = compare(
        lambda v: v * nx.lax.axis_index("i") + nx.lax.psum(v, "i"), (["i", ...],),
        ["i", ...], {"i": ("x", "y")}, (torch.linspace(0, 1, 8),), mesh_2d())


def mesh_411():
    return P.Mesh(np.array(P.devices()).reshape(4, 1, 1), ("x", "y", "z"))


def _moves():
    """The collectives that move values along an axis, as the collective matmuls of
    "Efficiently Scaling Transformer Inference" use them: (name, f, in_axes, out_axes)."""
    lax = nx.lax
    ring = [(j, (j + 1) % 8) for j in range(8)]
    return [
        ("all_gather_matmul",
         lambda v, w: torch.tanh(lax.all_gather(v, "i", axis=0, tiled=True) @ w),
         (["i", ...], [...]), [...]),
        ("all_gather_stacked", lambda v, w: lax.all_gather(v * w[:, 0], "i", axis=1) * v.sum(),
         (["i", ...], [...]), ["i", ...]),
        ("psum_scatter", lambda v, w: lax.psum_scatter(v @ w, "i", scatter_dimension=0, tiled=True),
         (["i", ...], [...]), ["i", ...]),
        ("psum_scatter_untiled", lambda v, w: lax.psum_scatter(torch.sin(v), "i") @ w,
         (["i", ...], [...]), ["i", ...]),
        ("all_to_all", lambda v, w: lax.all_to_all(torch.sin(v), "i", 0, 1, tiled=True) * w[0, 0],
         (["i", ...], [...]), ["i", ...]),
        ("ppermute_ring", lambda v, w: lax.ppermute(v, "i", ring) @ w, (["i", ...], [...]),
         ["i", ...]),
        ("pshuffle", lambda v, w: lax.pshuffle(v * v, "i", [3, 1, 4, 0, 7, 2, 6, 5]) + w[0, 0],
         (["i", ...], [...]), ["i", ...]),
        ("gather_then_all_to_all_unmapped",
         lambda v, w: lax.all_to_all(lax.all_gather(v, "i", axis=0, tiled=True), "j", 0, 0,
                                     tiled=True) @ w,
         (["i", "j", ...], [...]), ["j", ...]),
        ("all_gather_two_axes", lambda v, w: lax.all_gather(v, ("i", "j"), axis=0) @ w,
         (["i", "j", ...], [...]), [...]),
    ]


def moves(rank, results):
    # every collective that moves values along a split axis runs on the local shards, on a
    # 1-d mesh, over both dims of a 2x2 mesh, and with an axis on a size-1 mesh dim
    g = torch.Generator().manual_seed(3)
    w = torch.randn(3, 4, generator=g)
    meshes = [("1d", mesh_1d, {"i": "x"}), ("2x2", mesh_2d, {"i": ("x", "y")}),
              ("4x1x1", mesh_411, {"i": "x", "j": "y"})]
    for name, f, in_axes, out_axes in _moves():
        shape = (8, 2, 8, 3) if len(in_axes[0]) == 3 else (8, 8, 3)
        x = torch.randn(*shape, generator=g)
        for label, mesh, res in meshes:
            res = {k: v for k, v in res.items() if k in in_axes[0]}
            results[f"moves_{name}_{label}"] = compare(f, in_axes, out_axes, res, (x, w), mesh())


def named_ops(rank, results):
    # torch ops along a split axis (named reductions, dim-wise ops) run on the local shards:
    # the axis gathered whole, the op, the rank's chunk of the result
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 3, generator=g)
    cases = {
        "sum_broadcast": (lambda v: v.sum("i") * v, ["i", ...]),
        "softmax": (lambda v: nx.softmax(v, "i") * v, ["i", ...]),
        "cumsum": (lambda v: torch.tanh(v).cumsum("i"), ["i", ...]),
        "variance_loss": (lambda v: (v - v.mean("i")).pow(2).mean("i").sum(), [...]),
        "amax": (lambda v: torch.exp(v - v.amax("i")), ["i", ...]),
        "logsumexp": (lambda v: nx.logsumexp(v, ("i", 0)), [...]),
        "positional": (lambda v: nx.positional(v * 2, "i").sum() * v, ["i", ...]),
    }
    meshes = [("1d", mesh_1d, {"i": "x"}), ("2x2", mesh_2d, {"i": ("x", "y")})]
    for name, (f, out_axes) in cases.items():
        for label, mesh, res in meshes:
            results[f"named_{name}_{label}"] = compare(f, (["i", ...],), out_axes, res, (x,),
                                                       mesh())


def serial_loops(rank, results):
    # a SerialLoop beside mesh axes: the loop's chunks each run on this rank's shards, the
    # loop's collectives replayed across chunks, the mesh's all-reduced across ranks
    g = torch.Generator().manual_seed(11)
    x, w = torch.randn(4, 6, 3, generator=g), torch.randn(4, 3, 2, generator=g)
    lax = nx.lax
    progs = {
        "psum_both": (lambda v, u: lax.psum(v * v, ("c", "a")) + v, ["c", "a", ...]),
        "pmean_loop": (lambda v, u: torch.tanh(v) * lax.pmean(v, "a"), ["c", "a", ...]),
        "pdot_mesh": (lambda v, u: lax.pdot(v, u, "c") * v.sum(), ["c", "a", ...]),
        "gather_mesh": (lambda v, u: lax.all_gather(v, "c").sum(0) * v, ["c", "a", ...]),
        "named_op_mesh": (lambda v, u: nx.softmax(v, "c") + u.sum(), ["c", "a", ...]),
        "loss": (lambda v, u: lax.pmean((lax.pdot(v, u, "c") ** 2).sum(), ("a",)), [...]),
    }
    meshes = [("1d", mesh_1d, {"c": "x", "a": P.SerialLoop(3)}),
              ("2x2", mesh_2d, {"c": ("x", "y"), "a": P.SerialLoop(2)})]
    for name, (f, out_axes) in progs.items():
        for label, mesh, res in meshes:
            results[f"loop_{name}_{label}"] = compare(
                f, (["c", "a", ...], ["c", ...]), out_axes, res, (x, w), mesh())
    # pmax over a loop axis and a mesh axis: the cotangent shared among the entries that
    # attain the max on every rank of every chunk (mesh oracle, seed 3801, p3801_00388:
    # ranks holding none of them got 0/0, a NaN gradient)
    z = torch.randn(4, 2, 3, generator=g)
    for label, res in (("mesh_a", {"a": "x", "c": P.SerialLoop(2)}),
                       ("mesh_c", {"c": "x", "a": P.SerialLoop(4)})):
        results[f"loop_pmax_{label}"] = compare(
            lambda v: nx.lax.pmax(v * -1.5, ("a", "c")), ({0: "a", 1: "c"},),
            ["c", "a", ...], res, (z,), mesh_2d())
    # an axis both on the mesh and in a loop (JAX's ('x', SerialLoop)): each rank loops
    # over the chunks of its shard; the loop's collectives also all-reduce over the ranks
    progs["index"] = (lambda v, u: v * lax.axis_index("a") + lax.psum(v, "a")
                      * lax.axis_index("c"), ["c", "a", ...])
    progs["pmax"] = (lambda v, u: lax.pmax(v * -1.5, ("a", "c")) + v, ["c", "a", ...])
    for label, res in (("a", {"c": "x", "a": ("y", P.SerialLoop(3))}),
                       ("c", {"c": ("x", P.SerialLoop(2)), "a": "y"})):
        for name in ("psum_both", "pmean_loop", "pdot_mesh", "loss", "index", "pmax"):
            f, out_axes = progs[name]
            results[f"loop_and_mesh_{name}_{label}"] = compare(
                f, (["c", "a", ...], ["c", ...]), out_axes, res, (x, w), mesh_2d())


def moves_twice(rank, results):
    # second derivatives through the gather and its transpose (each differentiable: the
    # reduce-scatter's transpose is the gather), against the vectorized run's
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(8, 8, 3, generator=g), torch.randn(3, 4, generator=g)

    def second(f, in_axes, out_axes, res):
        xs = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        out = nx.xmap(f, in_axes=in_axes, out_axes=out_axes, axis_resources=res)(*xs)
        ct = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        gx = torch.autograd.grad((out * ct).sum(), xs[0], create_graph=True)[0]
        return torch.autograd.grad((gx * gx).sum(), xs, allow_unused=True)

    for name, f, in_axes, out_axes in _moves():
        if name in ("all_gather_matmul", "ppermute_ring", "psum_scatter"):
            want = second(f, in_axes, out_axes, {})
            P.comm_summary(reset=True)
            with mesh_1d():
                got = second(f, in_axes, out_axes, {"i": "x"})
            results[f"moves_twice_{name}"] = dict(
                err=_max_err(got, want), local=P.comm_summary()["local_shard_runs"])


def _loss_and_grads(fn, v, u) -> list:
    """``fn(v, u)`` and, by ``.backward()``, the gradients of both arguments."""
    v, u = v.clone().requires_grad_(), u.clone().requires_grad_()
    out = fn(v, u)
    out.backward()
    return [out.detach(), v.grad, u.grad]


def compiled(rank, results):
    # torch.compile of a step over a mesh xmap: dynamo compiles around the call, which
    # runs as its nx.jit program (each rank's local program compiled, its collectives in
    # the graph) -- after the traces, no call runs the local-shard engine eagerly
    x, w = torch.linspace(-1, 1, 8 * 3).reshape(8, 3), torch.linspace(0, 1, 3)

    def f(v, u):
        return nx.lax.psum(torch.tanh(v * u), "i").sum()

    ref = nx.xmap(f, in_axes=(["i", ...], [...]), out_axes=[...])
    mapped = nx.xmap(f, in_axes=(["i", ...], [...]), out_axes=[...], axis_resources={"i": "x"})
    step = torch.compile(nx.value_and_grad(mapped, argnums=1))
    loss = torch.compile(lambda v, u: mapped(v, u) * 2)
    for name, run, want in (
            ("compiled_step", step, lambda v, u: nx.value_and_grad(ref, argnums=1)(v, u)),
            ("compiled_loss_backward", lambda v, u: _loss_and_grads(loss, v, u),
             lambda v, u: _loss_and_grads(lambda a, b: ref(a, b) * 2, v, u))):
        errs = []
        P.comm_summary(reset=True)
        with mesh_1d():
            for k in range(4):   # new values each call
                errs.append(_max_err(run(x * (k + 1), w - k), want(x * (k + 1), w - k)))
        results[name] = dict(err=max(errs), local=P.comm_summary()["local_shard_runs"])
    want = nx.value_and_grad(ref, argnums=1)(x, w)
    step = nx.value_and_grad(mapped, argnums=1)
    lax = nx.lax
    progs = {
        "psum": f,
        "pmean_sq": lambda v, u: lax.pmean(((v * u) ** 2).sum(), "i"),
        "gather": lambda v, u: lax.psum((lax.all_gather(v * u, "i").sum(0) * v).sum(), "i"),
        "softmax": lambda v, u: lax.psum((nx.softmax(v * u, "i") * v).sum(), "i"),
        "ppermute": lambda v, u: lax.psum((lax.ppermute(
            v * u, "i", [(j, (j + 1) % 8) for j in range(8)]) * v).sum(), "i"),
        "pmax": lambda v, u: lax.psum(lax.pmax(v * u, "i").sum() * v.sum(), "i"),
    }
    for name, g in progs.items():
        ref = nx.value_and_grad(nx.xmap(g, in_axes=(["i", ...], [...]), out_axes=[...]),
                                argnums=(0, 1))
        mapped = nx.value_and_grad(nx.xmap(g, in_axes=(["i", ...], [...]), out_axes=[...],
                                           axis_resources={"i": "x"}), argnums=(0, 1))
        for backend in ("eager", "inductor"):
            jitted, errs = nx.jit(mapped, backend=backend), []
            for k in range(3):   # new values each call: nothing baked into the program
                xk, wk = x * (k + 1), w - k
                with mesh_1d():
                    a = jitted(xk, wk)
                b = ref(xk, wk)
                errs.append(_max_err([a[0], *a[1]], [b[0], *b[1]]))
            results[f"jit_{name}_{backend}"] = dict(err=max(errs),
                                                    programs=jitted.cache_size())
    # a jitted loss differentiated outside: traced with its backward (the collectives'
    # transposes are the path's Functions), compiled as a forward and a backward program
    for name, g in progs.items():
        # (inductor compiles take seconds on 4 ranks sharing 2 cores: two programs suffice)
        for backend in ("eager", "inductor") if name in ("psum", "gather") else ("eager",):
            fn = nx.jit(nx.xmap(g, in_axes=(["i", ...], [...]), out_axes=[...],
                                axis_resources={"i": "x"}), backend=backend)
            ref = nx.xmap(g, in_axes=(["i", ...], [...]), out_axes=[...])
            errs = []
            for k in range(3):
                with mesh_1d():
                    a = _loss_and_grads(fn, x * (k + 1), w - k)
                errs.append(_max_err(a, _loss_and_grads(ref, x * (k + 1), w - k)))
            results[f"jit_differentiated_outside_{name}_{backend}"] = dict(
                err=max(errs), stats=fn.stats())
    # a trace that fails on one rank only (user code branching on the rank): every rank
    # raises, naming it -- none is left waiting in the program's collectives
    def on_rank(v, u):
        if torch.distributed.get_rank() == 3:
            raise nx.AxisSpecError("rank 3 refuses")
        return nx.lax.psum((v * u).sum(), "i")

    lone = nx.jit(nx.xmap(on_rank, in_axes=(["i", ...], [...]), out_axes=[...],
                          axis_resources={"i": "x"}), backend="eager")
    try:
        with mesh_1d():
            lone(x, w)
        results["jit_fails_on_one_rank"] = dict(error=None)
    except nx.NamedAxisError as e:
        results["jit_fails_on_one_rank"] = dict(error=type(e).__name__, message=str(e))
    # the same jitted function on another mesh: another program
    jitted = nx.jit(step)
    with mesh_1d():
        one = jitted(x, w)
    with mesh_2d():
        two = jitted(x, w)
    results["jit_on_two_meshes"] = dict(
        err=_max_err([one[0], one[1], two[0], two[1]], [want[0], want[1], want[0], want[1]]),
        programs=jitted.cache_size())
    # nx.jit of a call taking DTensors (sharded state): compiled on the rank's shards,
    # its gradients DTensors laid out like the parameters
    def sharded_loss(params, v):
        h = lax.pdot(v, params["w"], "k").tanh()            # w: k x j, j split over y
        return lax.psum((h * params["b"]).sum(), ("i", "j"))
    axes = ({"w": ["k", "j", ...], "b": [...]}, ["i", "k", ...])
    m = mesh_2d()
    wt, bt, xv = torch.linspace(0, 1, 12).reshape(3, 4), torch.tensor(0.5), x
    params = {"w": nx.device_put(wt, nx.NamedSharding(m, {"j": "y"}), axes=["k", "j"]),
              "b": nx.device_put(bt, nx.NamedSharding(m, {}))}
    for p in params.values():
        p.requires_grad_()
    sharded_step = nx.jit(nx.value_and_grad(nx.xmap(sharded_loss, in_axes=axes, out_axes=[...],
                                            axis_resources={"i": "x", "j": "y"})))
    ref = nx.value_and_grad(nx.xmap(sharded_loss, in_axes=axes, out_axes=[...]))
    errs, layouts = [], []
    for k in range(3):
        with m:
            v, g = sharded_step(params, xv * (k + 1))
        rv, rg = ref({"w": wt, "b": bt}, xv * (k + 1))
        layouts.append([type(g["w"]).__name__, str(g["w"].placements),
                        list(g["w"].to_local().shape)])
        errs.append(_max_err([v.full_tensor() if hasattr(v, "full_tensor") else v,
                              g["w"].full_tensor(), g["b"].full_tensor()],
                             [rv, rg["w"], rg["b"]]))
    # the jitted loss alone, differentiated outside: the gradients reach the sharded
    # parameters
    sharded_loss_fn = nx.jit(nx.xmap(sharded_loss, in_axes=axes, out_axes=[...],
                                     axis_resources={"i": "x", "j": "y"}))
    for p in params.values():
        p.grad = None
    with m:
        v = sharded_loss_fn(params, xv)
    v.backward()
    rv, rg = ref({"w": wt, "b": bt}, xv)
    results["jit_sharded_loss_backward"] = dict(
        err=_max_err([v.full_tensor() if hasattr(v, "full_tensor") else v,
                      params["w"].grad.full_tensor(), params["b"].grad.full_tensor()],
                     [rv, rg["w"], rg["b"]]),
        stats=sharded_loss_fn.stats())
    results["jit_sharded_state"] = dict(err=max(errs), layouts=layouts,
                                         stats=sharded_step.stats())
    # eval_shape: where the mesh puts an axis changes no shape, so it runs vectorized
    with mesh_1d():
        shapes = nx.eval_shape(step, x, w)
    plain = nx.value_and_grad(nx.xmap(f, in_axes=(["i", ...], [...]), out_axes=[...]),
                              argnums=1)
    results["eval_shape_step"] = dict(
        got=[[list(s.shape), str(s.dtype)] for s in shapes],
        want=[[list(t.shape), str(t.dtype)] for t in plain(x, w)])


def vocab(rank, results):
    # a vocabulary split over the mesh: one_hot along the split axis, a contraction over
    # it, and the cross-entropy of vocab-parallel logits (logsumexp along the split axis)
    g = torch.Generator().manual_seed(2)
    x, labels = torch.randn(8, 3, generator=g), torch.tensor([1, 5, 7])
    lax = nx.lax
    cases = {
        "one_hot_pick": lambda v, y: lax.psum(nx.one_hot(y, 8, dim="v", dtype=v.dtype) * v, "v"),
        "vocab_ce": lambda v, y: (nx.logsumexp(v, "v") - lax.psum(
            nx.one_hot(y, 8, dim="v", dtype=v.dtype) * v, "v")).sum(),
        "einsum_contract": lambda v, y: nx.einsum("x{v},x{v}->x", v, v * 2),
    }
    for name, f in cases.items():
        for label, mesh, res in (("1d", mesh_1d, {"v": "x"}), ("2x2", mesh_2d, {"v": ("x", "y")})):
            results[f"vocab_{name}_{label}"] = compare(f, (["v", ...], [...]), [...], res,
                                                       (x, labels), mesh())


def inner_derivatives(rank, results):
    # a collective inside a derivative taken within the body (nx.grad there): the local
    # path differentiates through it, as JAX transposes psum to psum
    results["inner_grad_psum"] = compare(
        lambda v: nx.grad(lambda u: nx.lax.psum(u * u, "i"))(v) * v, (["i", ...],),
        ["i", ...], {"i": "x"}, (torch.linspace(-1, 1, 8),), mesh_1d())
    # ppermute inside a derivative taken within the body (mesh oracle, seed 3801,
    # p3801_00319: on the DTensor path, torch's "mixed torch.Tensor and DTensor" from the
    # backward's index tensor; the local-shard path runs it now)
    x = torch.linspace(-1, 1, 8)
    results["fallback_ppermute_grad"] = compare(
        lambda v: nx.grad(lambda u: (nx.lax.ppermute(u, "i", [(0, 1), (1, 0)] + [
            (j, j) for j in range(2, 8)]) * u).sum())(v) * v, (["i", ...],), ["i", ...],
        {"i": "x"}, (x,), mesh_1d())
    # two axes on one mesh axis that meet only inside an einsum (contracting one of them):
    # the ranks hold different slices of the other, so the all-reduce of the contraction
    # would add entries of different indices (mesh oracle, seed 99, p99_00030); the
    # contracted one is summed on its whole
    a, b = torch.linspace(-1, 1, 4), torch.linspace(-2, 2, 4).reshape(2, 2)
    results["shared_mesh_axis"] = compare(
        lambda x, y, z: nx.einsum("{c},n{d},{c}->n{c}", x, y, z),
        (["c", ...], {0: "d"}, ["c", ...]), {1: "c"}, {"c": "x", "d": "x"},
        (a, b, torch.linspace(0, 1, 4)), mesh_2d())
    # ... and contracting both of them (seed 99, p99_00252: the blocks off the diagonal
    # were missing)
    results["shared_mesh_axis_both"] = compare(
        lambda x, y, z: nx.einsum("p{c},p{c},np{d}->n", x, y, z),
        (["c", ...], ["c", ...], ["d", ...]), [...], {"c": "x", "d": "x"},
        (a.reshape(2, 2), b, torch.linspace(-1, 1, 8).reshape(4, 1, 2).expand(4, 2, 2)),
        mesh_2d())
    # ... and pdot of one with the other (each operand holds one of them)
    results["shared_mesh_axis_pdot"] = compare(
        lambda x, y: nx.lax.pdot(x, y, "c"), (["c", ...], ["d", ...]), ["d", ...],
        {"c": "x", "d": "x"}, (a, torch.linspace(-1, 2, 2)), mesh_2d())


def outer_transforms(rank, results):
    # nx.grad around the xmap (a functorch grad level): the local path takes part in it
    f = nx.xmap(lambda w, x: nx.lax.pmean(torch.sin(x * w).sum(), "b"),
                in_axes=([...], ["b", ...]), out_axes=[...], axis_resources={"b": "x"})
    w, x = torch.linspace(-1, 1, 3), torch.linspace(-2, 2, 8 * 3).reshape(8, 3)
    want = nx.grad(nx.xmap(lambda w, x: nx.lax.pmean(torch.sin(x * w).sum(), "b"),
                           in_axes=([...], ["b", ...]), out_axes=[...]))(w, x)
    P.comm_summary(reset=True)
    with mesh_1d():
        got = nx.grad(f)(w, x)
    s = P.comm_summary()
    results["outer_nx_grad"] = dict(err=_max_err(got, want), local=s["local_shard_runs"])
    # ... through pmax (ties across ranks) and a psum of a replicated weight
    def h(w, x):
        return nx.lax.pmax(torch.round(x * w), "b").sum() + nx.lax.psum(w * x, "b").sum()

    x2 = torch.tensor([[3.0, 1.0, 0.5], [3.0, 0.0, 2.0], [1.0, 3.0, 2.0], [3.0, 2.0, 1.0]])
    w2 = torch.tensor([1.0, 2.0, -1.0])
    spec = dict(in_axes=([...], ["b", ...]), out_axes=[...])
    want = nx.grad(nx.xmap(h, **spec), argnums=(0, 1))(w2, x2)
    P.comm_summary(reset=True)
    with mesh_1d():
        got = nx.grad(nx.xmap(h, axis_resources={"b": "x"}, **spec), argnums=(0, 1))(w2, x2)
    s = P.comm_summary()
    results["outer_nx_grad_pmax"] = dict(err=_max_err(got, want), local=s["local_shard_runs"])


def tuple_index(rank, results):
    # axis_index of a tuple of axes split over the mesh: linearized row-major, as JAX's
    x = torch.linspace(-1, 1, 4 * 2 * 3).reshape(4, 2, 3)
    for label, res in (("2x2", {"i": "x", "j": "y"}), ("one", {"i": ("x", "y")}),
                       ("loop", {"i": ("x", "y"), "j": P.SerialLoop(2)})):
        results[f"tuple_index_{label}"] = compare(
            lambda v: v * nx.lax.axis_index(("i", "j")) + nx.lax.axis_index(("j", "i")),
            (["i", "j", ...],), ["i", "j", ...], res, (x,), mesh_2d())


def inner_jvp(rank, results):
    # a jvp taken within the body: the collectives' Functions applied to the tangents
    # (and differentiable in turn: the gradient of the jvp reaches the inputs)
    lax = nx.lax
    x, w = torch.linspace(-1, 1, 8 * 3).reshape(8, 3), torch.linspace(-2, 1, 3 * 2).reshape(3, 2)

    def tangent(g):
        return lambda v, u: nx.jvp(lambda a: g(a, u), (v,), (torch.cos(v),))[1]

    progs = {
        "psum": lambda a, u: lax.psum(a * a, "i") * a,
        "pmean": lambda a, u: torch.sin(lax.pmean(a, "i")) * a,
        "pmax": lambda a, u: lax.pmax(a * 1.5, "i") + a,
        "pdot": lambda a, u: lax.pdot(a, u, "i") * a.sum(),
        "all_gather": lambda a, u: lax.all_gather(a * a, "i").sum(0) * a,
        "ppermute": lambda a, u: lax.ppermute(a, "i", [(j, (j + 1) % 8) for j in range(8)]) * a,
        "psum_scatter": lambda a, u: lax.psum_scatter(a * a, "i", scatter_dimension=0,
                                                      tiled=True),
        "softmax": lambda a, u: nx.softmax(a * a, "i"),
    }
    # jacrev (a vmap over the vjp's backward), jacfwd (a vmap over jvps), a vmap of a
    # closure: the Functions' vmap rules apply each collective to the batch at once
    progs["jacrev"] = lambda a, u: nx.jacrev(lambda b: lax.psum(b * b, "i") * b)(a)
    progs["jacfwd"] = lambda a, u: nx.jacfwd(lambda b: lax.pmax(b * 1.5, "i") + b)(a)
    progs["vmap"] = lambda a, u: torch.func.vmap(
        lambda r: lax.all_gather(r * a, "i").sum(0))(torch.ones(2)).sum(0) * a
    for name, g in progs.items():
        out_axes = ["i", ...]
        in_axes = (["i", ...], ["i", ...]) if name == "pdot" else (["i", ...], [...])
        u = torch.linspace(-1, 2, 8 * 3).reshape(8, 3) if name == "pdot" else w
        v = torch.linspace(-1, 1, 8 * 8).reshape(8, 8) if name == "psum_scatter" else x
        f = g if name in ("jacrev", "jacfwd", "vmap") else tangent(g)
        results[f"inner_jvp_{name}"] = compare(f, in_axes, out_axes, {"i": "x"}, (v, u),
                                               mesh_1d())


def around_transforms(rank, results):
    # vmap / forward-mode AD around a mesh call (was: the DTensor path, which raised
    # torch's "requires_grad_() inside of a function being transformed by a functorch
    # transform"): the local path's Functions have forward-mode and vmap rules, and its
    # full outputs are gathered by them
    lax = nx.lax
    x, w = torch.linspace(-1, 1, 8 * 3).reshape(8, 3), torch.linspace(-2, 1, 3)

    def body(v, u):
        return torch.sin(lax.psum(v * u, "i")) * v + lax.all_gather(v * u, "i").sum(0)

    def runs(res):
        f = nx.xmap(body, in_axes=(["i", ...], [...]), out_axes=["i", ...],
                    axis_resources=res)
        g = nx.xmap(lambda v, u: lax.pmean((body(v, u) ** 2).sum(), "i"),
                    in_axes=(["i", ...], [...]), out_axes=[...], axis_resources=res)
        ws = torch.stack([w, w * 2])
        return {
            "jvp": lambda: nx.jvp(f, (x, w), (torch.cos(x), torch.ones(3)))[1],
            "nx_vmap": lambda: nx.vmap(lambda u: f(x, u))(ws),
            "torch_vmap": lambda: torch.func.vmap(lambda u: f(x, u))(ws),
            "jacfwd": lambda: nx.jacfwd(lambda u: f(x, u))(w),
            "hessian": lambda: nx.hessian(lambda u: g(x, u))(w),
            "vmap_grad": lambda: torch.func.vmap(nx.grad(lambda u: g(x, u)))(ws),
        }

    want = {k: fn() for k, fn in runs({}).items()}
    for k, fn in runs({"i": "x"}).items():
        P.comm_summary(reset=True)
        with mesh_1d():
            got = fn()
        s = P.comm_summary()
        results[f"around_{k}"] = dict(err=_max_err([got], [want[k]]),
                                      local=s["local_shard_runs"])


def dtensor_outputs(rank, results):
    # outputs='dtensor': the caller's DTensor ops take the backward through the shards
    w, x = torch.linspace(-1, 1, 3), torch.linspace(-2, 2, 8 * 3).reshape(8, 3)

    def f(w, x):
        return torch.sin(x * w)

    want_w = w.clone().requires_grad_()
    (nx.xmap(f, in_axes=([...], ["b", ...]), out_axes=["b", ...])(want_w, x) ** 2).sum() \
        .backward()
    got_w = w.clone().requires_grad_()
    P.comm_summary(reset=True)
    with P.Mesh(np.array(P.devices()).reshape(2, 2), ("x", "y"), outputs="dtensor"):
        out = nx.xmap(f, in_axes=([...], ["b", ...]), out_axes=["b", ...],
                      axis_resources={"b": "x"})(got_w, x)
        (out ** 2).sum().full_tensor().backward()
    s = P.comm_summary()
    results["dtensor_outputs"] = dict(type=type(out).__name__,
                                      err=float((got_w.grad - want_w.grad).abs().max()),
                                      local=s["local_shard_runs"])


def folding(rank, results):
    # a gradient's copies along a closed-over axis are folded when they are all equal; the
    # ranks of one mesh row saw equal copies in their rows of 'a' and the other row did
    # not: each rank decided alone, the layouts differed and so did the collectives
    # (gloo aborted: mesh oracle, seed 31, p31_00076).  The decision spans every rank now.
    w = torch.tensor(0.0)
    x = -torch.ones(4, 2, 3)
    x[2:, 1] = 1.0          # rows 2-3 of 'a' (the second mesh row) differ along 'c'
    f = lambda w, x: nx.grad(lambda w: torch.maximum(w, x).sum())(w)  # noqa: E731
    results["fold_decision"] = compare(f, ([...], ["a", "c", ...]), ["a", "c"],
                                       {"a": "x", "c": "y"}, (w, x), mesh_2d())


def _backward_all_reduces(f, in_axes, out_axes, res, args, mesh, outputs_dtensor=False):
    """How many all-reduces the backward of ``sum(out * cotangent)`` issues."""
    from torch.distributed.tensor.debug import CommDebugMode

    xs = [a.clone().requires_grad_() for a in args]
    with mesh:
        out = nx.xmap(f, in_axes=in_axes, out_axes=out_axes, axis_resources=res)(*xs)
    loss = sum((o * (i + 2)).sum() for i, o in enumerate(_leaves(out)))
    if outputs_dtensor:
        loss = loss.full_tensor()
    mode = CommDebugMode()
    with mode:
        loss.backward()
    return sum(int(v) for k, v in mode.get_comm_counts().items() if "all_reduce" in str(k))


def uniform_cotangents(rank, results):
    # psum's transpose hands the cotangent on (the output is replicated: its cotangent is
    # the whole on every rank), through nodes that negate / add / reshape / divide by the
    # pmean's count.  Where the psum's value meets the split values again (another use by
    # each rank's instances, a per-rank factor), the parts are summed there: one all-reduce.
    w, x = torch.linspace(-1, 1, 3), torch.linspace(-2, 2, 8 * 3).reshape(8, 3)
    ax = ([...], ["b", ...])
    cases = {
        # name: (f, out_axes, backward all-reduces on the 1-d mesh: the weight's gradient
        # is replicated, one flat all-reduce; + 1 where the loss's cotangent needs one)
        "neg_pmean": (lambda w, x: -nx.lax.pmean(torch.sin(x * w).sum(), "b"), [...], 1),
        "pmean_reshaped": (lambda w, x: (nx.lax.pmean(torch.sin(x * w), "b") + 1.0)
                           .reshape(3, 1).sum(0), [...], 1),
        "psum_two_outputs": (lambda w, x: (nx.lax.psum(torch.sin(x * w), "b"),
                                           -nx.lax.pmean(x * w, "b")), ([...], [...]), 1),
        # the psum's value is also used by each rank's own instances
        "psum_used_again": (lambda w, x: (nx.lax.psum(torch.sin(x * w), "b"),
                                          x * nx.lax.psum(torch.sin(x * w), "b")),
                            ([...], ["b", ...]), 2),
        "psum_times_local": (lambda w, x: (nx.lax.psum(torch.sin(x * w), "b") * x),
                             ["b", ...], 2),
    }
    for name, (f, out_axes, want) in cases.items():
        results[f"uniform_{name}"] = compare(f, ax, out_axes, {"b": "x"}, (w, x), mesh_1d())
        results[f"uniform_{name}"]["backward_all_reduces"] = _backward_all_reduces(
            f, ax, out_axes, {"b": "x"}, (w, x), mesh_1d())
        results[f"uniform_{name}"]["want_all_reduces"] = want
    # two mesh dims, one pmean over each (no all-reduce for either transpose)
    f = lambda w, x: nx.lax.pmean(nx.lax.pmean(torch.sin(x * w), "b"), "c")  # noqa: E731
    args = (w, torch.linspace(-2, 2, 4 * 2 * 3).reshape(4, 2, 3))
    ax2 = ([...], ["b", "c", ...])
    results["uniform_two_mesh_dims"] = compare(f, ax2, [...], {"b": "x", "c": "y"}, args,
                                               mesh_2d())
    results["uniform_two_mesh_dims"]["backward_all_reduces"] = _backward_all_reduces(
        f, ax2, [...], {"b": "x", "c": "y"}, args, mesh_2d())
    results["uniform_two_mesh_dims"]["want_all_reduces"] = 2   # the weight's: one per mesh dim
    # outputs='dtensor': a replicated DTensor output's cotangent is the whole too
    f = lambda w, x: -nx.lax.pmean(torch.sin(x * w), "b")  # noqa: E731
    dmesh = P.Mesh(np.array(P.devices()), ("x",), outputs="dtensor")
    results["uniform_dtensor_output"] = dict(
        out_err=0.0, grad_err=0.0, local=1, dtensor=0, want_all_reduces=1,
        backward_all_reduces=_backward_all_reduces(f, ax, [...], {"b": "x"}, (w, x), dmesh,
                                                   outputs_dtensor=True))


def laid_out_dtensors(rank, results):
    # DTensor inputs laid out as the plan wants go straight to their local shards; their
    # gradients come back in one node: float32 and float64 in separate buffers, a
    # parameter the loss ignores gets none, one passed twice gets the sum, one split over
    # both mesh dims needs no reduction, the replicated ones are summed over the ranks
    g = torch.Generator().manual_seed(3)
    f32 = dict(generator=g, dtype=torch.float32)
    w = torch.randn(4, 6, **f32)                              # {'b': x} below: replicated
    v = torch.randn(6, generator=g, dtype=torch.float64)      # replicated, float64
    s2 = torch.randn(2, 4, 6, **f32)                          # ['c', 'b', ...]: both dims
    unused = torch.randn(3, **f32)
    x = torch.randn(2, 4, 6, **f32)                           # batch over x, 'c' over y

    def f(w, v, s2, unused, w_again, x):
        h = torch.tanh(x * w + s2) * w_again
        return nx.lax.pmean((h * v.to(h.dtype)).sum(), ("b", "c"))

    in_axes = (["b", ...], [...], ["c", "b", ...], [...], ["b", ...], ["c", "b", ...])
    res = {"b": "x", "c": "y"}
    ref_args = [t.clone().requires_grad_() for t in (w, v, s2, unused)]
    ref = nx.xmap(f, in_axes=in_axes, out_axes=[...])(*ref_args, ref_args[0], x)
    ref_grads = torch.autograd.grad(ref, ref_args, allow_unused=True)
    m = mesh_2d()
    sh = nx.NamedSharding(m, res)
    params = [p.requires_grad_() for p in nx.device_put(
        [w, v, s2, unused], sh, axes=[["b", ...], [...], ["c", "b", ...], [...]])]
    xd = nx.device_put(x, sh, axes=["c", "b", ...])
    P.comm_summary(reset=True)
    with m:
        out = nx.xmap(f, in_axes=in_axes, out_axes=[...], axis_resources=res)(
            *params, params[0], xd)
    grads = torch.autograd.grad(out, params, allow_unused=True)   # (unused: None)
    s = P.comm_summary()
    errs = [0.0 if (a is None and b is None) else float("inf") if (a is None or b is None)
            else float((nx.device_get(a).double() - b.double()).abs().max())
            for a, b in zip(grads, ref_grads)]
    results["laid_out_dtensors"] = dict(
        err=max(errs), out_err=float((nx.device_get(out) - ref).abs().max()),
        placements=[None if a is None else [str(q) for q in a.placements] for a in grads],
        dtypes=[None if a is None else str(a.dtype) for a in grads],
        local=s["local_shard_runs"], sharded=s["sharded_inputs"])


def _layer_norm(x):
    mu = nx.mean(x, "e")
    return (x - mu) / torch.sqrt(nx.mean((x - mu) ** 2, "e") + 1e-5)


def _residual(x, g1, w1, w2, g2, w3, w4):
    """Two MLP blocks on a residual stream, 'm' split: the second block's input is computed
    from the first's psum, so its column-parallel input sums its cotangent (Megatron's f)."""
    h = x + nx.lax.pdot(torch.relu(nx.lax.pdot(_layer_norm(x) * g1, w1, "e")), w2, "m")
    h = h + nx.lax.pdot(torch.relu(nx.lax.pdot(_layer_norm(h) * g2, w3, "e")), w4, "m")
    return nx.lax.pmean(nx.lax.psum(h * h, "e"), "b")


class _Twice(torch.autograd.Function):   # a user's own Function: its backward is opaque
    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def broadcast_sums(rank, results):
    # A replicated value computed from a psum, broadcast into a column-parallel pdot, has its
    # cotangent summed right there (Megatron's f): the cotangents above it are then the same
    # on every rank, the psums' transposes cost nothing, and the layer-norm weight above it
    # gets a whole gradient.  Every other use of the value keeps it exact: an elementwise
    # product with a split value, a user's Function, a second pdot (one sum for both).
    g = torch.Generator().manual_seed(5)
    f64 = dict(generator=g, dtype=torch.float64)
    E, M = 4, 8
    args = (torch.randn(4, E, **f64), torch.randn(E, **f64), torch.randn(E, M, **f64),
            torch.randn(M, E, **f64), torch.randn(E, **f64), torch.randn(E, M, **f64),
            torch.randn(M, E, **f64))
    ax = (["b", "e"], ["e"], ["e", "m"], ["m", "e"], ["e"], ["e", "m"], ["m", "e"])
    # backward all-reduces -- 1d: each block's f (the stream's layer norm times g1 or g2,
    # replicated, meets the split weights); x's and g1's gradients come whole.  2d ('b'
    # over x): the two f's over y; the weights and g1, g2 meet the batch split over x:
    # their parts summed at the edge, all in one flat buffer.
    for name, mesh, res, want in [("1d", mesh_1d(), {"m": "x"}, 2),
                                  ("2d", mesh_2d(), {"b": "x", "m": "y"}, 3)]:
        key = f"broadcast_residual_{name}"
        results[key] = compare(_residual, ax, [...], res, args, mesh)
        results[key]["backward_all_reduces"] = _backward_all_reduces(
            _residual, ax, [...], res, args, mesh)
        results[key]["want_all_reduces"] = want

    def after_pmean(x, g1, w1, w2, g2, w3, w4):
        # the first block ends in a pmean, and the second block's input is computed from it
        # (x's and g1's gradients are not asked for: g2's is then the only replicated one)
        x, g1 = x.detach(), g1.detach()
        h = x + nx.lax.pmean(torch.relu(nx.lax.pdot(_layer_norm(x) * g1, w1, "e")) * w2, "m")
        h = h + nx.lax.pdot(torch.relu(nx.lax.pdot(_layer_norm(h) * g2, w3, "e")), w4, "m")
        return nx.lax.pmean(nx.lax.psum(h * h, "e"), "b")

    key = "broadcast_after_pmean_1d"
    results[key] = compare(after_pmean, ax, [...], {"m": "x"}, args, mesh_1d())
    # the second block's f only: its sum makes the pmean's transpose free and g2's gradient
    # whole (no flat all-reduce); without it, the pmean's transpose and the flat one
    results[key]["backward_all_reduces"] = _backward_all_reduces(
        after_pmean, ax, [...], {"m": "x"}, args, mesh_1d())
    results[key]["want_all_reduces"] = 1

    def mixed(x, w1, w1b, w2, s):
        r = nx.lax.pdot(torch.sin(nx.lax.pdot(x, w1, "e")), w1b, "m")   # {b, f}: psum over m
        y = torch.cos(r)
        a = nx.lax.pdot(y, w2, "f")                                    # {b, m}: f
        b = nx.lax.pdot(y * 0.5, w2, "f")                              # its own f
        c = nx.sum(nx.lax.psum(y * s, "m"), "f")                       # a split use, no f
        d = nx.NamedTensor._wrap(_Twice.apply(y._data), y._names)      # a user's Function
        return nx.lax.psum(a * b, "m") + c + nx.sum(d, "f")

    margs = (torch.randn(3, 4, **f64), torch.randn(4, 8, **f64), torch.randn(8, 5, **f64),
             torch.randn(5, 8, **f64), torch.randn(8, 5, **f64))
    max_ = (["b", "e"], ["e", "m"], ["m", "f"], ["f", "m"], ["m", "f"])
    results["broadcast_mixed_uses"] = compare(mixed, max_, ["b", ...], {"m": "x"}, margs,
                                              mesh_1d())

def _random_residual(seed: int, full_output: bool):
    """A random stack of residual steps on a stream {b, e} with 'm' split (generated test
    of where cotangents are summed): blocks whose column-parallel input is the stream's
    layer norm, used once or twice, elementwise steps, a split product summed back, a
    user's Function -- and a loss, or the stream itself, as the output."""
    rng = np.random.default_rng(seed)
    steps = [str(rng.choice(["block", "twice", "elementwise", "split", "opaque"]))
             for _ in range(int(rng.integers(2, 6)))]

    def f(x, g, g2, w1, w2, s):
        h = x
        for k, step in enumerate(steps):
            if step in ("block", "twice"):
                y = _layer_norm(h) * g
                h = h + nx.lax.pdot(torch.tanh(nx.lax.pdot(y, w1, "e")), w2, "m")
                if step == "twice":
                    h = h + nx.lax.pdot(torch.sin(nx.lax.pdot(y * 0.5, w1, "e")), w2, "m")
            elif step == "elementwise":
                h = torch.tanh(h) * g2 + h
            elif step == "split":
                h = h + nx.lax.psum(torch.cos(h) * s, "m")
            else:
                h = nx.NamedTensor._wrap(_Twice.apply(h._data), h._names) * 0.5 + h
        return nx.lax.pmean(nx.lax.psum(h * h, "e"), "b") if full_output else h

    return f, [...] if full_output else ["b", "e", ...], steps


def broadcast_programs(rank, results):
    g = torch.Generator().manual_seed(11)
    f64 = dict(generator=g, dtype=torch.float64)
    args = (torch.randn(4, 4, **f64), torch.randn(4, **f64), torch.randn(4, **f64),
            torch.randn(4, 8, **f64), torch.randn(8, 4, **f64), torch.randn(8, 4, **f64))
    ax = (["b", "e"], ["e"], ["e"], ["e", "m"], ["m", "e"], ["m", "e"])
    worst = {}
    for seed, full_output in itertools.product(range(12), (True, False)):
        f, out_axes, steps = _random_residual(seed, full_output)
        for name, mesh, res in [("1d", mesh_1d(), {"m": "x"}),
                                ("2d", mesh_2d(), {"b": "x", "m": "y"})]:
            got = compare(f, ax, out_axes, res, args, mesh, ct_seed=seed)
            key = f"{seed} {name} {'loss' if full_output else 'stream'}: {' '.join(steps)}"
            worst[key] = max(got["out_err"], got["grad_err"]) if got["local"] == 1 else -1.0
    results["broadcast_programs"] = worst


def replicated_meets_split(rank, results):
    # Where a value replicated over a mesh dim meets values split over it, the parts of its
    # cotangent are summed there (its cotangent is the whole on every rank).  Places found
    # by the mesh oracle (seed 3915) outside the dispatcher: a per-instance dynamic_slice
    # start, nx.grad's reduce_axes over a split axis, pdot over a SerialLoop axis with a
    # mesh axis the other operand lacks, the copies nx.grad drops, a closed-over value.
    lax = nx.lax
    x, y = torch.linspace(-1, 1, 5), torch.linspace(-2, 2, 4 * 5).reshape(4, 5)
    cases = {
        "dynamic_slice": (lambda a, b: lax.dynamic_slice(a, [lax.axis_index("c")], [2]) * 2,
                          {"c": "x"}),
        "reduce_axes": (lambda a, b: nx.grad(lambda w: (torch.sin(w) * b).sum(),
                                             reduce_axes=("c",))(a) + b, {"c": "x"}),
        "two_argnums": (lambda a, b: sum(nx.grad(lambda p, q: (p * p * q).sum(),
                                                 argnums=(0, 1))(a, b)), {"c": "x"}),
    }
    for name, (f, res) in cases.items():
        results[f"replicated_meets_{name}"] = compare(
            f, ([...], ["c", ...]), ["c", ...], res, (x, y), mesh_1d())
    results["replicated_meets_dropped_copies"] = compare(
        lambda a, b: nx.grad(lambda q: (torch.sin(a) * q).sum())(b),
        (["b", ...], [None, "c", ...]), ["b", "c", ...], {"c": "x"},
        (torch.linspace(-1, 1, 2 * 3).reshape(2, 3), torch.linspace(-2, 2, 3 * 4).reshape(3, 4)),
        mesh_1d())
    # nx.vjp's cotangent lacking the split axis, expanded over the output's instances:
    # its outer gradient sums their parts over the ranks (mesh oracle seed 4101,
    # p4101_00337: with the custom_jvp the tape keeps the pullback's copies, and the
    # replicated argument's outer gradient missed the other ranks' parts)
    @nx.custom_jvp
    def sin_rule(v):
        return torch.sin(v)

    sin_rule.defjvp(lambda p, t: (torch.sin(p[0]), 2 * torch.cos(p[0]) * t[0]))

    def vjp_body(w, s):
        def fn(w, s):
            torch.maximum(sin_rule(w), s)   # unused
            return torch.sin(s)
        out, pb = nx.vjp(fn, w, s)
        return (out, *pb(torch.cos(out) + 0.5))

    results["replicated_meets_custom_jvp_in_vjp"] = compare(
        vjp_body, (["b", "a", ...], [...]), ["b", "a", ...], {"a": "x"},
        (torch.linspace(-1, 1, 16).reshape(4, 4), torch.tensor(0.7)), mesh_1d())
    # reduce_axes over an axis both on the mesh and in a loop (('x', SerialLoop(2))): the
    # chunks' sums were added over the ranks' share only -- half the gradient, silently
    # (mesh oracle seed 9311, p9311_00468)
    results["replicated_meets_reduce_axes_mesh_and_loop"] = compare(
        lambda a, b: nx.grad(lambda w: lax.psum((torch.sin(w) * b).sum(0), "d"),
                             reduce_axes=("c",))(a),
        ([...], ["d", None, "c", ...]), ["c", "d", ...], {"c": ("x", nx.SerialLoop(2))},
        (torch.tensor(0.3), torch.linspace(-2, 2, 3 * 2 * 4).reshape(3, 2, 4)), mesh_2d())
    z = torch.linspace(-1, 1, 4 * 3 * 2).reshape(4, 3, 2)
    results["replicated_meets_pdot_loop"] = compare(
        lambda a, b: lax.pdot(a, b, "b"), (["b", ...], ["d", None, "b", ...]), ["d", ...],
        {"d": "x", "b": nx.SerialLoop(2)}, (torch.linspace(0, 1, 2), z), mesh_1d())


def double_backward(rank, results):
    # A gradient taken with create_graph and differentiated again: a replicated input's
    # gradient, summed over the ranks in the first backward, is a full output of it --
    # its cotangent is the same on every rank, not a share (the differentiable all-reduce
    # transposed it into the ranks' sum: 4x on the 1-d mesh, silently).  Full inputs on
    # both meshes, DTensors laid out as the plan wants on the 2x2 one.
    g = torch.Generator().manual_seed(5)
    f64 = dict(generator=g, dtype=torch.float64)
    args = [torch.randn(4, 4, **f64), torch.randn(4, **f64), torch.randn(4, 8, **f64),
            torch.randn(8, 4, **f64), torch.randn(4, **f64), torch.randn(4, 8, **f64),
            torch.randn(8, 4, **f64)]
    ax = (["b", "e"], ["e"], ["e", "m"], ["m", "e"], ["e"], ["e", "m"], ["m", "e"])

    def second(xs, run, first: int, then: list):
        out = run(*xs)
        gx = torch.autograd.grad(out, xs[first], create_graph=True)[0]
        total = (gx * gx).sum()
        total = total.full_tensor() if type(total).__name__ == "DTensor" else total
        return [nx.device_get(t) for t in torch.autograd.grad(total, [xs[i] for i in then])]

    want = {}
    for first in (0, 2):
        xs = [a.clone().requires_grad_() for a in args]
        want[first] = second(xs, nx.xmap(_residual, in_axes=ax, out_axes=[...]), first,
                             [0, 1, 4])
    for name, mesh, res, laid_out in [("1d", mesh_1d(), {"m": "x"}, False),
                                      ("2d", mesh_2d(), {"b": "x", "m": "y"}, False),
                                      ("2d_dtensors", mesh_2d(), {"b": "x", "m": "y"}, True)]:
        first = 2 if laid_out else 0
        if laid_out:
            xs = [p.requires_grad_() for p in nx.device_put(
                args, nx.NamedSharding(mesh, res), axes=list(ax))]
        else:
            xs = [a.clone().requires_grad_() for a in args]
        P.comm_summary(reset=True)
        with mesh:
            got = second(xs, nx.xmap(_residual, in_axes=ax, out_axes=[...],
                                     axis_resources=res), first, [0, 1, 4])
        results[f"double_backward_{name}"] = dict(
            err=_max_err(got, want[first]), local=P.comm_summary()["local_shard_runs"])


if __name__ == "__main__":
    run_rank([extremes, dtypes, edges, moves, moves_twice, serial_loops, named_ops, vocab,
              compiled, inner_derivatives, inner_jvp, tuple_index,
              outer_transforms, around_transforms,
              dtensor_outputs, folding, uniform_cotangents, laid_out_dtensors, broadcast_sums,
              broadcast_programs, double_backward, replicated_meets_split])
