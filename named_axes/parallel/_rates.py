"""The machine's rates the resource model prices a step with, measured once (``nx.calibrate``).

:func:`calibrate` measures a matmul, a copy and the process group's all-reduces here, plus
the probe the API layer registers (:data:`PROGRAM_PROBE`); under torch.distributed every
rank takes the slowest rank's figures, so every rank chooses alike.  See
docs/parallelism.md, "axis_resources='auto'".

>>> r = Rates(flops_per_s=1e12, bytes_per_s=1e11, op_s=1e-5, link_bytes_per_s=1e10,
...           link_latency_s=2e-5)
>>> round(r.allreduce_s(1e6, 4), 9)    # 2 * 3/4 of a megabyte over the link, plus latency
0.00017
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, fields

import torch

__all__ = ["Rates", "calibrate", "DEFAULT_LINK", "PROGRAM_PROBE", "best_time", "world_size"]

# Without torch.distributed there is no link to measure: a modest one (about a 10 GbE
# network, or gloo between processes of one host) is assumed; give Rates to say otherwise.
DEFAULT_LINK = {"link_bytes_per_s": 1.0e9, "link_latency_s": 5.0e-5}


@dataclass(frozen=True)
class Rates:
    """How fast a device computes and a link moves data: what the cost model prices with."""

    flops_per_s: float
    bytes_per_s: float
    op_s: float
    link_bytes_per_s: float
    link_latency_s: float
    split_op_s: float | None = None   # an op while an axis is split over ranks (op_s)
    mesh_call_s: float = 0.0   # a step's fixed cost when it splits an axis over ranks
    edge_gather_s: float | None = None   # gathering a full input's gradient (latency)

    @property
    def engine_op_s(self) -> float:
        return self.op_s if self.split_op_s is None else self.split_op_s

    def allreduce_s(self, nbytes: float, group: int) -> float:
        """A ring all-reduce of ``nbytes`` per rank over ``group`` ranks."""
        return self.link_latency_s + 2 * (group - 1) / group * nbytes / self.link_bytes_per_s

    def collective_s(self, op: str, nbytes: float, group: int) -> float:
        """One collective over ``group`` ranks; ``nbytes``: the bytes each rank holds
        before it (for ``all_gather``: its piece; else the whole it reduces or moves)."""
        if group <= 1:
            return 0.0
        if op == "edge_gather":   # a full input's gradient, gathered after the backward
            latency = self.link_latency_s if self.edge_gather_s is None else self.edge_gather_s
            return latency + (group - 1) * nbytes / self.link_bytes_per_s
        if op == "all_reduce":
            return self.allreduce_s(nbytes, group)
        share = {"all_gather": group - 1, "reduce_scatter": (group - 1) / group,
                 "all_to_all": (group - 1) / group, "permute": 1.0}[op]
        return self.link_latency_s + share * nbytes / self.link_bytes_per_s


_MEASURED: dict = {}


def calibrate(*, refresh: bool = False, cache: str | None = None, device: str = "cpu") -> Rates:
    """Measure this machine's :class:`Rates` (once per process; ``refresh`` measures
    again).  ``cache``: a JSON file keeping them per machine between runs.  Under
    torch.distributed the measuring is collective: every rank calls it.

    >>> import named_axes as nx
    >>> nx.calibrate().flops_per_s > 0
    True
    """
    key = f"{platform.node()}|{device}|torch {torch.__version__}|{world_size()} ranks"
    if key in _MEASURED and not refresh:
        return _MEASURED[key]
    if cache and not refresh and os.path.exists(cache):
        with open(cache) as f:
            stored = json.load(f).get(key)
        if stored:
            _MEASURED[key] = Rates(**stored)
            return _MEASURED[key]
    measured = _measure(device)
    if PROGRAM_PROBE:
        measured.update(PROGRAM_PROBE[0]())
    rates = _agreed(measured)
    _MEASURED[key] = rates
    if cache:
        _store(cache, key, rates)
    return rates


def world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def best_time(fn, repeats: int = 5, *, typical: bool = False) -> float:
    """The fastest (``typical``: the median) of ``repeats`` timed calls of ``fn``, after
    one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] if typical else min(times)


def _measure(device: str) -> dict:
    n = 512
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    big = torch.empty(1 << 22, device=device)   # 16 MiB
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    mm = best_time(lambda: (torch.mm(a, b), sync()))
    copy = best_time(lambda: (big.clone(), sync()))
    small = torch.ones(8, device=device)
    op = best_time(lambda: [small.add(1) for _ in range(100)]) / 100
    rates = {"flops_per_s": 2 * n ** 3 / mm, "bytes_per_s": 2 * big.numel() * 4 / copy,
             "op_s": op}
    rates.update(_measure_link() if world_size() > 1 else DEFAULT_LINK)
    return rates


# What a named program adds over plain torch, ``fn() -> dict`` of Rates fields
# (``op_s``, and over the ranks ``split_op_s`` and ``link_latency_s``): measured with
# xmap, a layer above this one, which registers it (named_axes/_calibrate.py).
PROGRAM_PROBE: list = []


def _measure_link() -> dict:
    """Latency and bandwidth of the process group's all-reduce (two sizes, one line)."""
    dist = torch.distributed
    world = dist.get_world_size()
    small, large = torch.zeros(1), torch.zeros(1 << 20)   # 4 bytes, 4 MiB
    t_small = best_time(lambda: dist.all_reduce(small))
    t_large = best_time(lambda: dist.all_reduce(large), repeats=3)
    moved = 2 * (world - 1) / world * large.numel() * 4
    return {"link_latency_s": t_small,
            "link_bytes_per_s": moved / max(t_large - t_small, 1e-9)}


def _agreed(rates: dict) -> Rates:
    """Every rank's figures made the slowest rank's (so the ranks choose alike): the
    max over the ranks of each time, and of each rate's inverse."""
    if world_size() > 1:
        rates = {"split_op_s": rates["op_s"], "mesh_call_s": 0.0,
                 "edge_gather_s": rates["link_latency_s"], **rates}
        names = [f.name for f in fields(Rates)]
        slow = torch.tensor([1 / rates[k] if k.endswith("per_s") else rates[k] for k in names],
                            dtype=torch.float64)
        torch.distributed.all_reduce(slow, op=torch.distributed.ReduceOp.MAX)
        rates = {k: 1 / v if k.endswith("per_s") else v for k, v in zip(names, slow.tolist())}
    return Rates(**rates)


def _store(path: str, key: str, rates: Rates) -> None:
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    data[key] = asdict(rates)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
