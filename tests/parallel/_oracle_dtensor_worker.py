"""One gloo rank of the oracle-on-DTensor test (launched by test_oracle_dtensor.py).

argv: ``OUT_DIR N SEED PER_PROG``.  Every rank generates the same sample of oracle
programs, runs each under every assignment of ``mesh_runs.assignments`` on a 2x2 and a
1-d mesh of the 4 ranks (the DTensor engine, on each rank's shards), compares the outputs and the inputs' gradients (taken by
``torch.autograd`` outside the xmap) with its own vectorized run, and
after each run checks (one ``all_gather_object``) that all ranks ran the same program and
ended the same way.  Writes ``rank{R}.json`` (``runs``, ``fails``, ``seconds``) and, before
each run, ``rank{R}.progress`` (the run about to start: what hung, if the ranks hang).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))

import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402

import mesh_runs  # noqa: E402
import torch  # noqa: E402

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402

def _vjp(f, x):
    out, pullback = nx.vjp(f, x)
    return pullback(torch.cos(out) + 0.5)[0]


# Bugs the sample found, pinned one by one: (program, in_axes, out_axes, axis_resources).
PINS = {
    # nx.vjp / nx.jvp (torch.func) inside the engine: its saved-tensor hooks (a plain
    # tensor saved for the backward is saved as a DTensor) made torch.func refuse to start
    "vjp": (lambda x: _vjp(lambda v: nx.lax.psum(torch.sin(v), "c"), x),
            (["c", ...],), ["c", ...], {"c": "x"}),
    "vjp_loop": (lambda x: _vjp(lambda v: (torch.sin(v) * v).sum(0), x),
                 (["c", "a", ...],), ["c", "a", ...], {"c": "x", "a": nx.SerialLoop(2)}),
    # forward-mode AD on DTensors: DTensor had no rule for aten._has_same_storage_numel
    "jvp": (lambda x: nx.jvp(torch.tanh, (x,), (torch.cos(x),))[1],
            (["c", ...],), ["c", ...], {"c": "x"}),
    # forward-mode AD with an operand that is not a dual tensor: DTensor fails inside
    # (torch 2.13); the DTensor path says so with an AxisResourceError, not a raw
    # AssertionError (the local-shard path computes it: no collective in the jvp)
    "jvp_closure": (lambda x, y: nx.jvp(lambda v: v * y, (x,), (torch.cos(x),))[1],
                           (["c", ...], ["c", ...]), ["c", ...], {"c": "x"}),
    # a 3-operand einsum on a SerialLoop chunk: the chunk's strides became the DTensor's
    # global strides, and DTensor's einsum decomposition refused to view it
    "einsum3_loop": (lambda xy, z: nx.einsum("{d,c,a},pn{c,a},pn{a}->p{a}", *xy, z),
                     ((["a", "c", "d"], [None, "a", "c", ...]), [None, None, "a", ...]),
                     ["a", ...], {"d": "x", "a": nx.SerialLoop(3)}),
    # a two-operand einsum whose operand is split over both mesh dims (seed 99, p99_00356):
    # its mm between folded views flattened that dim with others, and DTensor (torch
    # 2.13) could not unflatten the result: a raw RuntimeError
    "einsum_two_mesh_dims": (lambda x, y: nx.einsum("mp{c,a},np{b}->mpn{c,a}", x, y),
                             ((None, None, "a", "c"), {-3: "b"}), ["a", "c", "b", ...],
                             {"a": ("x", "y")}),
}
PIN_ARGS = {"vjp": lambda: (torch.linspace(-1, 1, 4 * 3).reshape(4, 3),),
            "vjp_loop": lambda: (torch.linspace(-1, 1, 4 * 2 * 3).reshape(4, 2, 3),),
            "jvp": lambda: (torch.linspace(-1, 1, 4 * 3).reshape(4, 3),),
            "jvp_closure": lambda: (torch.linspace(-1, 1, 4 * 3).reshape(4, 3),
                                           torch.linspace(0, 1, 4 * 3).reshape(4, 3)),
            "einsum3_loop": lambda: ((torch.linspace(-1, 1, 24).reshape(3, 4, 2),
                                      torch.linspace(-2, 1, 48).reshape(2, 3, 4, 2)),
                                     torch.linspace(-1, 2, 12).reshape(2, 2, 3)),
            "einsum_two_mesh_dims": lambda: (torch.linspace(-1, 1, 48).reshape(3, 2, 4, 2),
                                             torch.linspace(-2, 1, 8).reshape(2, 2, 2))}
# the same with three operands (seed 202, p202_00152): torch.einsum on DTensors chains
# views of its own, which DTensor could not unflatten either: contracted pairwise now
PINS["einsum3_two_mesh_dims"] = (
    lambda x, y, z: nx.einsum("m{a,d},m{c},nm{a,c}->n{d}", x, y, z),
    ({-2: "d", 2: "a"}, [None, "c", ...], ["a", "c", ...]), [None, "d", ...],
    {"a": ("x", "y")})
PIN_ARGS["einsum3_two_mesh_dims"] = lambda: (torch.linspace(-1, 1, 24).reshape(3, 2, 4),
                                             torch.linspace(-2, 1, 12).reshape(3, 4),
                                             torch.linspace(-1, 2, 96).reshape(4, 4, 2, 3))


@nx.custom_jvp
def _sin2(x):
    return torch.sin(x)


_sin2.defjvp(lambda p, t: (torch.sin(p[0]), 2 * torch.cos(p[0]) * t[0]))
# a custom_jvp's rule transposed in a backward: torch.func inside the backward refused to
# run under the engine's saved-tensor hooks (mesh oracle, seed 6, p6_00046)
PINS["custom_jvp_vjp"] = (lambda x: _vjp(lambda v: _sin2(v) * v, x),
                          (["c", ...],), ["c", ...], {"c": "x"})
PIN_ARGS["custom_jvp_vjp"] = lambda: (torch.linspace(-1, 1, 4 * 3).reshape(4, 3),)


# a second derivative through abs: DTensor (torch 2.13) takes the double backward's
# aten.to.dtype_layout for an out= variant and asserts; the engine says so with an
# AxisResourceError, not a raw AssertionError (mesh oracle, seed 2026, p2026_00273).
# The local-shard path computes it (its inner nx.grad differentiates through pmean).
PINS["grad2_abs_raises"] = (
    lambda p, x: nx.grad(lambda p: (nx.grad(lambda p: nx.lax.pmean(
        torch.sin((p * x).abs()), "b"))(p) * torch.sin(p)).sum())(p),
    (["c", "b"], ["a", "c", ...]), ["b", "a", "c", ...], {"b": "x"})
PIN_ARGS["grad2_abs_raises"] = lambda: (torch.tensor([[0.3, -0.7]]), torch.tensor([[1.5]]))


# copies of a gradient that are equal in the vectorized run came out a few ulps apart on
# the mesh (gloo's ring all-reduce adds each part of the buffer in a different rank
# order) and were once not folded (seed 101, p101_00160).  Named shapes now come from the
# program: the value carries 'd' (from 0 * yd) as in JAX, on the mesh as in the
# vectorized run
PINS["fold_after_ring_sum"] = (
    lambda p, xa, yd: nx.value_and_grad(lambda p: nx.lax.pmean(
        torch.sin(p * xa) * (1 + 0 * yd), "a"))(p)[0],
    ([...], ["a", ...], ["d", ...]), ["d", ...], {"a": "w"})
PIN_ARGS["fold_after_ring_sum"] = lambda: (torch.tensor(0.37), torch.linspace(-3.1, 2.9, 8),
                                           torch.linspace(0, 1, 16))

# generated programs the sample found wrong, run again under the assignment that failed,
# with and without nx.jit, input gradients included: (corpus seed, index, resources)
CORPUS_PINS = [
    # nx.grad's reduce_axes over an axis on the mesh and in a SerialLoop: half the
    # gradient, silently (p9311_00468)
    (9311, 468, {"b": ("x", ["loop", 2])}),
    # jacfwd in the body under nx.jit with an outer gradient: the cut backward returned a
    # meta constant for a gradient (p9313_00105): now run inline
    (9313, 105, {"b": "x"}),
    # a second nx.jit trace of a jacfwd / jvp over a shard past offset 0: torch's
    # fake-tensor cache failed forward AD's layout assert on ranks 2 and 3 (p9314_00418)
    # or let it out raw (p9316_00433); nx.jit traces again without the cache
    (9314, 418, {"c": "x"}),
    (9316, 433, {"b": "w"}),
    # a custom_jvp inside nx.grad under nx.jit with an outer gradient: torch.func hands
    # the rule's forward its inputs unwrapped, so the tape lost them and kept every copy
    # along 'b' (a named shape the vectorized run lacks, p9321_00330)
    (9321, 330, {"b": "x"}),
    # linearize in the body under nx.jit with an outer gradient: the joint trace's
    # backward met a meta tensor of torch's ZeroTensor fallback beside a fake input
    # (FakeTensorDeviceMismatchError, raw, p9325_00074): now run inline
    (9325, 74, {"a": "x"}),
]


def corpus_pins(meshes: dict) -> list:
    """The differences (as text) of :data:`CORPUS_PINS`' runs from the vectorized run."""
    import oracle_programs as programs
    import torch_interp

    out = []
    for seed, k, res in CORPUS_PINS:
        prog = programs.one(seed, k)
        vres = torch_interp.run(prog)
        gref = mesh_runs.run_on(prog, {}, contextlib.nullcontext(), grads=True)
        for jit in (False, True):
            rres = mesh_runs.run_on(prog, res, meshes[mesh_runs.mesh_of(res)], grads=True,
                                    jit=jit)
            out += [f"{prog['id']} jit={jit}: {d.kind}: {d.msg}"
                    for d in mesh_runs.judge(res, rres, vres)
                    + mesh_runs.judge_grads(res, rres, gref)]
    return out


def pins(meshes: dict) -> dict:
    """Each pin's max abs error against the vectorized run (or the error it raised); a pin
    whose resources name ``w`` runs on the 1-d mesh, the others on the 2x2 one."""
    out = {}
    for name, (fn, in_axes, out_axes, res) in PINS.items():
        args = PIN_ARGS[name]()
        ref = nx.xmap(fn, in_axes=in_axes, out_axes=out_axes)(*args)
        try:
            with meshes[mesh_runs.mesh_of(res)]:
                got = nx.xmap(fn, in_axes=in_axes, out_axes=out_axes,
                              axis_resources=res)(*args)
            out[name] = float((got - ref).abs().max())
        except Exception as e:  # noqa: BLE001 - reported by the test
            out[name] = f"{type(e).__name__}: {e}"
    return out


def run_paths(progs: list, seed: int, per_prog: int, meshes: dict, sync, progress) -> dict:
    """The sample, input gradients included: the runs counted per ``"<mesh> <status>"``,
    and the fails; how many calls ran on the local-shard path and how many were made."""
    P.comm_summary(reset=True)
    got = mesh_runs.run_sample(progs, seed, per_prog, meshes, sync=sync, progress=progress,
                               grads=True, jit_every=int(os.environ.get("NX_ORACLE_MESH_JIT",
                                                                        "4")))
    summary = P.comm_summary()
    return {"runs": got["runs"], "fails": got["fails"],
            "local_shard_runs": summary["local_shard_runs"], "calls": summary["calls"]}


def main(out: str, n: int, seed: int, per_prog: int) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict = {}
    progress_path = os.path.join(out, f"rank{rank}.progress")

    def progress(text: str) -> None:
        with open(progress_path, "w") as f:
            f.write(text)

    def sync(tag: str):
        tags = [None] * world
        dist.all_gather_object(tags, tag)
        if len(set(tags)) > 1:
            return "ranks disagree: " + " | ".join(f"rank {r}: {t}" for r, t in enumerate(tags))
        return None

    try:
        t0 = time.time()
        progs = mesh_runs.sample(n, seed)
        devs = np.array(P.devices())
        meshes = {"xy": P.Mesh(devs.reshape(2, 2), ("x", "y")), "w": P.Mesh(devs, ("w",))}
        pinned = pins(meshes)
        from_corpus = corpus_pins(meshes)
        result = run_paths(progs, seed, per_prog, meshes, sync, progress)
        result["pins"] = pinned
        result["corpus_pins"] = from_corpus
        result["programs"] = len(progs)
        result["seconds"] = time.time() - t0
    except BaseException:
        result["exception"] = traceback.format_exc()
        if os.path.exists(progress_path):
            with open(progress_path) as f:
                result["exception"] += f"\nwhile running: {f.read()}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if "exception" not in result:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # no C++ static destructors (gloo threads have aborted at exit)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
