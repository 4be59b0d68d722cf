"""One rank of test_parallel_sharded.py (4 gloo ranks, a 2x2 ('dp', 'mp') mesh).

Sharded named values as inputs and outputs: made without a global value, taken by xmap
without moving, gradients sharded like the parameters, an Adam step on local shards.
Writes ``rank{R}.json`` into argv[1].
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _ranks import run_rank  # noqa: E402

import named_axes as nx  # noqa: E402
from named_axes import lax  # noqa: E402
from named_axes import parallel as P  # noqa: E402

RES = {"batch": "dp", "hidden": "mp"}
AXES = (["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...],
        ["batch", ...])


def counts(fn):
    from torch.distributed.tensor.debug import CommDebugMode

    mode = CommDebugMode()
    with mode:
        out = fn()
    return out, {str(k).split(".")[-1]: int(v) for k, v in mode.get_comm_counts().items()}


def named_loss(w1, w2, images, labels):
    hidden = torch.tanh(lax.pdot(images, w1, "inputs"))
    logits = lax.pdot(hidden, w2, "hidden")
    preds = logits - nx.logsumexp(logits, "classes")
    targets = nx.one_hot(labels, lax.psum(1, "classes"), dim="classes")
    return -lax.pmean(lax.psum(targets * preds, "classes"), "batch")


def data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(6, 8, generator=g), torch.randn(8, 3, generator=g),
            torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))


def mesh(**kw):
    return P.Mesh(np.array(P.devices()).reshape(2, 2), ("dp", "mp"), **kw)


def placements(t):
    return [str(p) for p in t.placements] if type(t).__name__ == "DTensor" else "plain"


def local(t):
    return t.to_local() if type(t).__name__ == "DTensor" else t


def making(rank, results):
    m = mesh()
    s = nx.NamedSharding(m, RES)
    w1, w2, images, labels = data()
    out = {}
    # device_put of full values, dims named like xmap's in_axes
    put = nx.device_put([w1, w2, images, labels], s, axes=list(AXES))
    out["put_local"] = [list(local(t).shape) for t in put]
    out["put_placements"] = [placements(t) for t in put]
    out["put_err"] = max(float((nx.device_get(t) - f).abs().max())
                         for t, f in zip(put, (w1, w2, images, labels)))
    # PartitionSpec style
    ps = nx.device_put(images, nx.NamedSharding(m, nx.PartitionSpec("dp", "mp")))
    out["pspec_local"] = list(local(ps).shape)
    # process-local data: each rank passes its batch shard only
    dp = dict(zip(m.axis_names, P._dtensor_comms.device_mesh(m).get_coordinate()))["dp"]
    mine = images[dp * 4:(dp + 1) * 4]
    arr = nx.make_array_from_process_local_data(s, mine, axes=["batch", ...])
    out["pld_shape"], out["pld_local"] = list(arr.shape), list(local(arr).shape)
    out["pld_err"] = float((nx.device_get(arr) - images).abs().max())
    # per-shard initializer with the counter-based generator
    init = nx.make_array_from_callback((6, 8), s, lambda idx: P.counter_normal(7, (6, 8), idx),
                                       names=("inputs", "hidden"))
    out["cb_local"] = list(local(init).shape)
    out["cb_err"] = float((nx.device_get(init) - P.counter_normal(7, (6, 8))).abs().max())
    # errors: indivisible, unknown mesh axis
    try:
        nx.device_put(torch.ones(3, 2), s, axes=["batch", ...])
        out["indivisible"] = None
    except ValueError as e:
        out["indivisible"] = str(e)
    results["making"] = out


def training(rank, results):
    w1, w2, images, labels = data()
    # single-process reference: two Adam steps
    ref_params = [w1.clone().requires_grad_(), w2.clone().requires_grad_()]
    ref_f = nx.xmap(named_loss, in_axes=list(AXES), out_axes=[...])
    opt = torch.optim.Adam(ref_params, lr=0.1)
    ref_losses, ref_grads = [], None
    for _ in range(2):
        loss = ref_f(*ref_params, images, labels)
        opt.zero_grad()
        loss.backward()
        if ref_grads is None:
            ref_grads = [p.grad.clone() for p in ref_params]
        opt.step()
        ref_losses.append(float(loss))

    m = mesh()
    s = nx.NamedSharding(m, RES)
    params = [p.requires_grad_() for p in nx.device_put([w1, w2], s, axes=list(AXES[:2]))]
    batch = nx.device_put([images, labels], s, axes=list(AXES[2:]))
    f = nx.xmap(named_loss, in_axes=list(AXES), out_axes=[...], axis_resources=RES)
    opt = torch.optim.Adam(params, lr=0.1)
    losses, step_comms = [], []
    P.comm_summary(reset=True)
    out = {}
    for step in range(2):
        with m:
            loss, c1 = counts(lambda: f(*params, *batch))
        opt.zero_grad()
        _, c2 = counts(lambda: loss.backward())
        if step == 0:
            out["loss_type"] = type(loss).__name__
            out["loss_placements"] = placements(loss)
            out["grad_placements"] = [placements(p.grad) for p in params]
            out["param_placements"] = [placements(p) for p in params]
            out["grad_local"] = [list(local(p.grad).shape) for p in params]
            out["grad_err"] = max(float((nx.device_get(p.grad) - g).abs().max())
                                  for p, g in zip(params, ref_grads))
        opt.step()
        losses.append(float(nx.device_get(loss)))
        step_comms.append({"forward": c1, "backward": c2})
    out["state_local"] = [list(local(opt.state[p]["exp_avg"]).shape) for p in params]
    out["state_placements"] = [placements(opt.state[p]["exp_avg_sq"]) for p in params]
    out["param_err"] = max(float((nx.device_get(p) - r).abs().max())
                           for p, r in zip(params, ref_params))
    out["loss_err"] = max(abs(a - b) for a, b in zip(losses, ref_losses))
    out["comms"] = step_comms
    out["summary"] = P.comm_summary(reset=True)
    results["training"] = out


def layouts(rank, results):
    w1, w2, images, labels = data()
    f = nx.xmap(named_loss, in_axes=list(AXES), out_axes=[...], axis_resources=RES)
    ref = float(nx.xmap(named_loss, in_axes=list(AXES), out_axes=[...])(w1, w2, images, labels))
    out = {}
    m = mesh()
    # w1 sharded over dp instead of mp: redistributed, counted, same loss; grad back in
    # w1's own layout
    wrong = nx.device_put(w1, nx.NamedSharding(m, nx.PartitionSpec("dp"))).requires_grad_()
    w2s, ims, lbs = nx.device_put([w2, images, labels], nx.NamedSharding(m, RES),
                                  axes=list(AXES[1:]))
    P.comm_summary(reset=True)
    with m:
        loss = f(wrong, w2s, ims, lbs)
    loss.backward()
    out["redistributed_loss_err"] = abs(float(nx.device_get(loss)) - ref)
    summ = P.comm_summary(reset=True)
    out["redistributed"] = summ["redistributed_inputs"]
    out["redistributions"] = summ["redistributions"]
    out["wrong_grad_placements"] = placements(wrong.grad)
    # refused with on_mismatch='error'
    with mesh(on_mismatch="error"):
        try:
            f(wrong, w2s, ims, lbs)
            out["refused"] = None
        except ValueError as e:
            out["refused"] = str(e)
    # full in -> full out (unchanged); sharded in + outputs='full' -> full
    with m:
        out["full_type"] = type(f(w1, w2, images, labels)).__name__
    with mesh(outputs="full"):
        out["asked_full_type"] = type(f(wrong.detach(), w2s, ims, lbs)).__name__
    # sharded outputs keep the plan's layout: hidden activations over (dp, mp)
    g = nx.xmap(lambda w1, x: torch.tanh(lax.pdot(x, w1, "inputs")),
                in_axes=(AXES[0], AXES[2]), out_axes=["batch", "hidden", ...],
                axis_resources=RES)
    with m:
        h = g(nx.device_put(w1, nx.NamedSharding(m, RES), axes=AXES[0]), ims)
    out["act_type"], out["act_placements"] = type(h).__name__, placements(h)
    out["act_local"] = list(local(h).shape)
    out["act_err"] = float((nx.device_get(h) - torch.tanh(images @ w1)).abs().max())
    # the input check runs once per input structure
    P.comm_summary(reset=True)
    with m:
        for _ in range(3):
            f(w1, w2, images, labels)
        f(w1[:, :4], w2[:4], images, labels)
    out["checks"] = P.comm_summary(reset=True)["input_checks"]
    results["layouts"] = out


if __name__ == "__main__":
    run_rank([making, training, layouts])
