"""One rank of test_parallel_dtensor_local.py (4 gloo ranks, a 2x2 mesh, via torchrun).

Generated cases of ``named_axes.parallel._dtensor_local``: two-operand einsums and sums
of DTensors in every layout the generator draws (``Replicate``, ``Shard`` of any dim,
``Partial``; sizes that split evenly and unevenly), each computed shard by shard and
compared -- value and both gradients -- with plain torch on the full tensors.  Writes per
rank the number of cases computed locally, declined, and the largest error.
"""
from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _ranks import run_rank  # noqa: E402

EQUATIONS = ["bk,kn->bn", "bsk,kh->bsh", "bhk,hkn->bn", "ab,ab->a", "abc,cd->abd",
             "ab,b->a", "ab,cb->ac", "a,b->ab", "bsh,hse->be", "abc,abd->acd"]
SIZES = {"a": 4, "b": 6, "c": 3, "d": 4, "e": 2, "h": 4, "k": 8, "n": 5, "s": 2}


def _placements(rng, ndim, partial_ok):
    from torch.distributed.tensor import Partial, Replicate, Shard

    out = []
    for _ in range(2):
        r = rng.random()
        if r < 0.35:
            out.append(Replicate())
        elif r < 0.9 or not partial_ok:
            out.append(Shard(rng.randrange(ndim)))
        else:
            out.append(Partial())
    return out


def _consistent(rng, tx, ty):
    """Per mesh dim: one letter split in every operand that carries it, or nothing, or one
    operand partial."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    px, py = [], []
    for _ in range(2):
        letter = rng.choice(sorted(set(tx + ty)) + [None, "partial"])
        if letter == "partial":
            which = rng.random() < 0.5
            px.append(Partial() if which else Replicate())
            py.append(Replicate() if which else Partial())
        else:
            px.append(Shard(tx.index(letter)) if letter and letter in tx else Replicate())
            py.append(Shard(ty.index(letter)) if letter and letter in ty else Replicate())
    return px, py


def _dtensor(full, dm, placements, rank_seed):
    """A leaf DTensor laid out ``placements`` whose global value is ``full`` (a Partial
    one as random pieces that sum to it)."""
    import torch
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    partial = [k for k, p in enumerate(placements) if p.is_partial()]
    if not partial:
        return distribute_tensor(full, dm, placements).detach().requires_grad_()
    base = [Replicate() if p.is_partial() else p for p in placements]
    local = distribute_tensor(full, dm, base).to_local()
    gen = torch.Generator().manual_seed(rank_seed)
    noise = torch.randn(local.shape, generator=gen, dtype=local.dtype)
    # pieces that sum to ``local`` over each partial mesh dim: noise on one coordinate,
    # the value minus it on the other
    coord = dm.get_coordinate()
    for k in partial:
        local = local - noise if coord[k] == 0 else noise.clone()
        noise = noise * 0
    return DTensor.from_local(local, dm, placements, run_check=False,
                              shape=full.shape, stride=full.stride()).detach().requires_grad_()


def cases(rank, results):
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from named_axes.parallel._dtensor_local import local_einsum, local_sum

    dm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("p", "q"))
    rng = random.Random(0)   # the same draws on every rank
    done = declined = 0
    worst = 0.0
    for i in range(160):
        eq = rng.choice(EQUATIONS)
        lhs, out = eq.split("->")
        tx, ty = lhs.split(",")
        torch.manual_seed(i)
        x = torch.randn([SIZES[c] for c in tx])
        y = torch.randn([SIZES[c] for c in ty])
        g = torch.randn([SIZES[c] for c in out])
        if rng.random() < 0.6:   # a layout that lines up (as a plan makes them)
            px, py = _consistent(rng, tx, ty)
        else:
            px = _placements(rng, len(tx), True)
            py = _placements(rng, len(ty), not any(p.is_partial() for p in px))
        dx, dy = _dtensor(x, dm, px, 100 + i), _dtensor(y, dm, py, 200 + i)
        res = local_einsum(eq, dx, dy)
        if res is None:
            declined += 1
            continue
        done += 1
        xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
        ref = torch.einsum(eq, xr, yr)
        ref.backward(g)
        from torch.distributed.tensor import distribute_tensor, Replicate

        gd = distribute_tensor(g, dm, [Replicate(), Replicate()])
        res.backward(gd)
        worst = max(worst, float((res.full_tensor() - ref).abs().max()),
                    float((dx.grad.full_tensor() - xr.grad).abs().max()),
                    float((dy.grad.full_tensor() - yr.grad).abs().max()))
    results["einsum"] = {"done": done, "declined": declined, "err": worst}

    done = declined = 0
    worst = 0.0
    for i in range(80):
        ndim = rng.randrange(1, 4)
        shape = [rng.choice([2, 3, 4, 6]) for _ in range(ndim)]
        dims = sorted(rng.sample(range(ndim), rng.randrange(1, ndim + 1)))
        mean = rng.random() < 0.5
        torch.manual_seed(1000 + i)
        x = torch.randn(shape)
        dx = _dtensor(x, dm, _placements(rng, ndim, True), 300 + i)
        res = local_sum(dx, dims, mean)
        if res is None:
            declined += 1
            continue
        done += 1
        xr = x.clone().requires_grad_()
        ref = xr.mean(dims) if mean else xr.sum(dims)
        g = torch.randn(ref.shape)
        ref.backward(g)
        from torch.distributed.tensor import distribute_tensor, Replicate

        res.backward(distribute_tensor(g, dm, [Replicate(), Replicate()]))
        worst = max(worst, float((res.full_tensor() - ref).abs().max()),
                    float((dx.grad.full_tensor() - xr.grad).abs().max()))
    results["sum"] = {"done": done, "declined": declined, "err": worst}

    # second derivatives: the backward differentiates through the shards it reads
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    x, y = torch.randn(4, 8), torch.randn(8, 6)
    dx = distribute_tensor(x, dm, [Shard(0), Replicate()]).requires_grad_()
    dy = distribute_tensor(y, dm, [Replicate(), Shard(1)]).requires_grad_()
    (gx,) = torch.autograd.grad((local_einsum("bk,kn->bn", dx, dy) ** 2).sum(), dx,
                                create_graph=True)
    (gx * gx).sum().backward()
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    (rx,) = torch.autograd.grad((torch.einsum("bk,kn->bn", xr, yr) ** 2).sum(), xr,
                                create_graph=True)
    (rx * rx).sum().backward()
    errs = [float((gx.full_tensor() - rx).abs().max()),
            float((dy.grad.full_tensor() - yr.grad).abs().max())]
    z = torch.randn(4, 6)
    dz = distribute_tensor(z, dm, [Shard(0), Shard(1)]).requires_grad_()
    (gz,) = torch.autograd.grad((local_sum(dz, [0], True) ** 3).sum(), dz, create_graph=True)
    (gz * gz).sum().backward()
    zr = z.clone().requires_grad_()
    (rz,) = torch.autograd.grad((zr.mean([0]) ** 3).sum(), zr, create_graph=True)
    (rz * rz).sum().backward()
    errs += [float((gz.full_tensor() - rz).abs().max()),
             float((dz.grad.full_tensor() - zr.grad).abs().max())]
    results["second_order_err"] = max(errs)

    # forward-mode AD: the local functions define no jvp, so they leave it to DTensor
    import torch.autograd.forward_ad as fwAD
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    a = distribute_tensor(torch.randn(4, 8), dm, [Shard(0), Replicate()])
    b = distribute_tensor(torch.randn(8, 6), dm, [Replicate(), Shard(1)])
    with fwAD.dual_level():
        results["forward_ad_declined"] = (local_einsum("bk,kn->bn", a, b) is None
                                          and local_sum(a, [0], False) is None)
    results["outside_forward_ad"] = local_einsum("bk,kn->bn", a, b) is not None


if __name__ == "__main__":
    run_rank([cases])
