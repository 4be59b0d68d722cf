"""One rank of test_gpt_mesh.py's memory audit (4 gloo ranks via torchrun).

Trains examples/gpt_mesh.py on its 2x2 mesh for a few steps while recording every
DTensor made on this rank (its global shape, placements and local shape: parameters,
activations, gradients, optimizer state, the engine's own) and every plain tensor an op
makes (the program body runs on each rank's local shards).  Writes ``rank{R}.json``
into argv[1]: the records that hold a *global* value -- a global-shaped mp-split
parameter or gradient that is not split over ``mp``, a batch-carrying value that is
not split over ``dp``, a plain tensor of a split weight's global shape or with the
global batch -- and the collectives of one step.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from _ranks import run_rank  # noqa: E402

BATCH = 6   # no other size of the model is 6: a global batch shows as a dim of 6
CONFIG = ["--mode", "mesh", "--steps", "3", "--batch", str(BATCH), "--context", "16",
          "--embed", "32", "--heads", "8", "--mlp", "128", "--layers", "1", "--quiet"]


def audit(rank, results):
    import torch
    from torch.distributed.tensor import DTensor

    import gpt_mesh

    made = []
    orig = DTensor.__new__

    def recording_new(cls, local_tensor, spec, *, requires_grad):
        made.append((tuple(spec.shape), tuple(spec.placements), tuple(local_tensor.shape)))
        return orig(cls, local_tensor, spec, requires_grad=requires_grad)

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    plain = []   # every plain tensor an op makes (the body runs on local shards)

    class RecordPlain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if type(t) is torch.Tensor and t.device.type != "meta":
                    plain.append((str(func), tuple(t.shape)))
            return out

    DTensor.__new__ = recording_new
    try:
        with RecordPlain():
            out = gpt_mesh.main(CONFIG)
    finally:
        DTensor.__new__ = orig
    specs = gpt_mesh.param_specs(55, embed=32, heads=8, mlp_size=128, layers=1, context=16)
    split = {tuple(sorted(shape)) for shape, names, _ in specs.values()
             if {"heads", "mlp"} & set(names)}
    dp, mp = 0, 1   # the example's mesh axes ("dp", "mp")
    bad = []
    for shape, placements, local in made:
        if tuple(sorted(shape)) in split and not placements[mp].is_shard():
            bad.append(f"global weight-shaped {shape} laid out {placements}, local {local}")
        if BATCH in shape and not placements[dp].is_shard():
            bad.append(f"batch-carrying {shape} laid out {placements}, local {local}")
    for func, shape in plain:
        if tuple(sorted(shape)) in split:
            bad.append(f"global weight-shaped plain tensor {shape} made by {func}")
        # (the example draws the global batch's BATCH start offsets on every rank, so
        # that each rank reads its own rows: integers, not a batch of data)
        if BATCH in shape and not (func.startswith("aten.randint") and shape == (BATCH,)):
            bad.append(f"batch-carrying plain tensor {shape} made by {func}")
    results["made"] = len(made)
    results["plain_made"] = len(plain)
    results["global_values"] = sorted(set(bad))
    results["comms"] = out["comms_per_step"]
    results["losses"] = out["losses"]
    results["grad_local_shapes"] = out["grad_local_shapes"]
    results["param_local_shapes"] = out["param_local_shapes"]


if __name__ == "__main__":
    run_rank([audit])
