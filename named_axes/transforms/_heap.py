"""Keep freed CPU buffers in the process's heap between compiled steps (glibc only).

A jitted training step returns new parameters and optimizer state each step, and the
previous step's buffers are freed.  glibc hands memory back to the OS as soon as the
free space at the top of its heap passes ``M_TRIM_THRESHOLD`` -- by default twice the
largest freed mmapped block (3.2 MB once a 1.6 MB weight was freed) -- so every step
grew the heap again and faulted each new page in: the P1 tutorial training step's Adam
update (11 MB of traffic, 0.2 ms) took 1.2 ms, and the step 2.8 ms against JAX's 2.4.

The first program ``nx.jit`` compiles for the CPU therefore raises the two thresholds
to glibc's own dynamic maxima (allocations below 32 MiB come from the heap; the heap
is trimmed when 64 MiB lie free at its top), once per process.  It changes where freed
memory waits, not how much a program uses.  Left alone: a process where the user chose
(``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_THRESHOLD_`` in the environment), where
``NAMED_AXES_HEAP_TUNING=0``, or a C library other than glibc.

>>> tune_heap() in (True, False)
True
"""
from __future__ import annotations

import ctypes
import os

__all__ = ["tune_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

# mallopt parameters (malloc.h) and the values set: glibc's DEFAULT_MMAP_THRESHOLD_MAX
# on 64-bit, and twice it (the trim threshold its dynamic rule pairs with it).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
_USER_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
              "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")

_state: list = []   # [applied: bool] once decided


def tune_heap() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; whether they are raised."""
    if _state:
        return _state[0]
    _state.append(_apply())
    return _state[0]


def _apply() -> bool:
    if os.environ.get("NAMED_AXES_HEAP_TUNING", "").strip().lower() in ("0", "false", "no",
                                                                         "off"):
        return False
    if any(v in os.environ for v in _USER_VARS):   # the user tuned malloc
        return False
    try:
        libc = ctypes.CDLL(None)   # the process's own symbols: its C library's
        libc.gnu_get_libc_version   # glibc's; other C libraries lack mallopt's meaning
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # the mmap threshold first: setting either one turns glibc's dynamic rule off
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
