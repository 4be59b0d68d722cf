"""One rank of the 4-rank gloo tests (launched by test_parallel_dtensor.py via torchrun).

Runs every scenario and writes ``rank{R}.json`` into the directory given as argv[1]:
per scenario, the max abs error against the single-process result, the local
(per-rank) shapes seen inside the program, and how many collectives DTensor issued.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import _tutorial_program as T  # noqa: E402
from _ranks import err, run_rank  # noqa: E402

import named_axes as nx  # noqa: E402
from named_axes import parallel as P  # noqa: E402
from named_axes._tensor import NamedTensor  # noqa: E402


def local_shape(v):
    data = v._data if isinstance(v, NamedTensor) else v
    if type(data).__name__ == "DTensor":
        return list(data.to_local().shape), [str(p) for p in data.placements]
    return list(data.shape), ["plain"]


def comm_counts(fn):
    from torch.distributed.tensor.debug import CommDebugMode

    mode = CommDebugMode()
    with mode:
        out = fn()
    return out, {str(k): int(v) for k, v in mode.get_comm_counts().items()}


def tutorial(rank, results):
    d = T.data(seed=1)
    ref = T.loss_and_grads(T.loss, *d)
    seen = {}

    def probed(w1, w2, images, labels):
        seen["w1"], seen["w2"] = local_shape(w1), local_shape(w2)
        seen["images"], seen["labels"] = local_shape(images), local_shape(labels)
        h = T.pdot(images, w1, "inputs")
        seen["hidden_act"] = local_shape(h)
        return T.named_loss(w1, w2, images, labels)

    for key, (res, shape, names) in T.STRATEGIES.items():
        devs = np.array(P.devices()).reshape(shape)
        with P.Mesh(devs, names):
            out, counts = comm_counts(lambda: T.loss_and_grads(T.xmapped(res, probed), *d))
        results[key] = dict(err=err(ref, out), loss=float(out[0]), shapes=dict(seen),
                            comms=counts, out_type=type(out[0]).__name__)


def collectives(rank, results):
    # psum of axis_index over a split axis: each rank holds 2 of 8 indices, so a correct
    # total (28) needs communication.
    f = nx.xmap(lambda x: nx.lax.psum(x * nx.lax.axis_index("i"), "i"), in_axes=["i", ...],
                out_axes=[...], axis_resources={"i": "x"})
    with P.Mesh(np.array(P.devices()), ("x",)):
        out, counts = comm_counts(lambda: f(torch.ones(8)))
    results["psum_axis_index"] = dict(value=float(out), comms=counts)
    g = nx.xmap(lambda x: nx.lax.pmax(x, "i"), in_axes=["i", ...], out_axes=[...],
                axis_resources={"i": "x"})
    with P.Mesh(np.array(P.devices()), ("x",)):
        v = g(torch.arange(8.0).reshape(8, 1) * torch.ones(8, 2))
    results["pmax"] = dict(value=v.tolist())
    # pmap over all ranks
    pm = nx.pmap(lambda x: x - nx.lax.pmean(x, "i"), axis_name="i") if hasattr(nx, "pmap") \
        else P.pmap(lambda x: x - nx.lax.pmean(x, "i"), axis_name="i")
    results["pmap"] = dict(value=pm(torch.arange(8.0)).tolist())
    # DTensors on request
    with P.Mesh(np.array(P.devices()), ("x",), outputs="dtensor"):
        h = nx.xmap(lambda x: x * 2, in_axes=["i", ...], out_axes=["i", ...],
                    axis_resources={"i": "x"})(torch.ones(8, 3))
    results["dtensor_out"] = dict(type=type(h).__name__,
                                  local=list(getattr(h, "to_local", lambda: h)().shape))
    # SerialLoop composed with the mesh
    d = T.data(seed=2)
    ref = T.loss_and_grads(T.loss, *d)
    with P.Mesh(np.array(P.devices()), ("x",)):
        out = T.loss_and_grads(T.xmapped({"hidden": "x", "batch": P.SerialLoop(2)}), *d)
    results["serial_and_mesh"] = dict(err=err(ref, out))
    # one axis on the mesh and a loop (JAX's ('x', 'l')): batch 8 = 2 chunks x 4 ranks
    with P.Mesh(np.array(P.devices()), ("x",)):
        out = T.loss_and_grads(T.xmapped({"batch": ("x", P.SerialLoop(2))}), *d)
        idx = nx.xmap(lambda v: v * nx.lax.axis_index("i") + nx.lax.psum(v, "i"),
                      in_axes=["i", ...], out_axes=["i", ...],
                      axis_resources={"i": ("x", P.SerialLoop(2))})(torch.arange(16.0))
    want = torch.arange(16.0) ** 2 + 120.0
    results["mesh_and_loop_one_axis"] = dict(err=err(ref, out),
                                             index_err=float((idx - want).abs().max()))
    # in place into a plain tensor the program made: acc += a gathered (DTensor) value
    def accumulate(x):
        acc = torch.zeros(8, 3)
        acc += nx.lax.all_gather(x, "i")
        return (acc * acc).sum()

    x = torch.arange(24.0).reshape(8, 3).requires_grad_()
    with P.Mesh(np.array(P.devices()), ("x",)):
        total = nx.xmap(accumulate, in_axes=["i", ...], out_axes=[...],
                        axis_resources={"i": "x"})(x)
    total.backward()
    results["inplace_plain"] = dict(value=float(total), grad_err=float(
        (x.grad - 2 * x.detach()).abs().max()))
    # a conflict between two axes on one mesh axis, raised on every rank
    with P.Mesh(np.array(P.devices()), ("x",)):
        try:
            nx.xmap(lambda a, b: a * b, in_axes=(["a", ...], ["b", ...]), out_axes=["a", "b", ...],
                    axis_resources={"a": "x", "b": "x"})(torch.ones(4), torch.ones(8))
            results["conflict"] = dict(error=None)
        except ValueError as e:
            results["conflict"] = dict(error=str(e))


if __name__ == "__main__":
    run_rank([tutorial, collectives])
