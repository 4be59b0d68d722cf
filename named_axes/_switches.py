"""Process-wide switches, read once at ``import named_axes``.

``NAMED_AXES_NO_FASTPATH=1`` sends every op on named values through the general
dispatcher: no direct operator / method / function bindings, no inline same-layout or
broadcast-by-name lanes in the pointwise rules, no single-name lane in the collectives.
CI runs the core suites both ways (``make test-nofastpath``), so the fast lanes and the
general path cannot drift apart.

>>> import named_axes._switches as s
>>> isinstance(s.FASTPATH, bool)
True
"""
from __future__ import annotations

import os

__all__ = ["FASTPATH"]

FASTPATH: bool = os.environ.get("NAMED_AXES_NO_FASTPATH", "").strip().lower() not in (
    "1", "true", "yes", "on")
