"""``nx.explain_resources``: the chosen assignment beside the best alternatives, as a table.

>>> import numpy as np, torch, named_axes as nx
>>> f = nx.xmap(lambda x, w: nx.lax.psum((x @ w).sum(), 'b'), in_axes=(['b', ...], [...]),
...             out_axes=[...])
>>> report = nx.explain_resources(f, nx.Mesh(np.arange(4), ('x',)), torch.ones(512, 256),
...                               torch.ones(256, 256), rates=nx.Rates(1e12, 1e11, 1e-5, 1e10, 2e-5))
>>> print(report)                                            # doctest: +NORMALIZE_WHITESPACE
axis_resources  step (model)  compute   comm  collectives  memory/device
{'b': 'x'}           71.4 us  51.4 us  20 us            1      512.5 KiB   <- chosen
{}                    115 us   115 us   0 us            0        1.3 MiB
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from ._auto import Candidate, _ranked
from ._mesh import Mesh
from ._rates import Rates

__all__ = ["ResourceReport", "explain_resources"]

_COLUMNS = ("axis_resources", "step (model)", "compute", "comm", "collectives",
            "memory/device")


def _seconds(s: float) -> str:
    unit, scale = next((u, k) for u, k in (("s", 1.0), ("ms", 1e-3), ("us", 0.0)) if s >= k)
    return f"{s / (scale or 1e-6):.3g} {unit}"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class ResourceReport:
    """The chosen :class:`Candidate` and the ranked alternatives shown beside it."""

    chosen: Candidate
    candidates: tuple
    mesh_shape: dict

    def rows(self) -> list:
        return [(c.spelled(), _seconds(c.time_s), _seconds(c.compute_s), _seconds(c.comm_s),
                 str(c.collectives), _bytes(c.memory_bytes) + ("" if c.fits else " (over)"))
                for c in self.candidates]

    def __str__(self) -> str:
        rows = [_COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
        lines = []
        for k, r in enumerate(rows):
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
            mark = "   <- chosen" if k == 1 else ""
            lines.append("  ".join(cells) + mark)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr{}>".format(' style="font-weight:bold"' if k == 0 else "")
            + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
            for k, r in enumerate(self.rows()))
        return (f"<table><caption>axis_resources on mesh {html.escape(str(self.mesh_shape))}"
                f" (first: chosen)</caption><tr>{head}</tr>{body}</table>")


def explain_resources(f: Any, mesh: Mesh, *args: Any, top: int = 5,
                      memory_per_device: float | None = None, rates: Rates | None = None,
                      train: bool | None = None, optimizer_states: int = 2) -> ResourceReport:
    """What :func:`nx.plan_resources` chooses and the ``top - 1`` best alternatives,
    with their modelled step time, compute, communication, collectives and memory per
    device (its ``str`` is a table, Jupyter shows it as html).  Arguments as
    :func:`nx.plan_resources`."""
    ranked = _ranked(f, mesh, args, memory_per_device, rates, train, optimizer_states)
    return ResourceReport(ranked[0], tuple(ranked[:max(top, 1)]), dict(mesh.shape))
