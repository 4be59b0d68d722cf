"""Environment for the torch-xla tests, set before torch-xla can start its runtime.

Imported first by test_parallel_xla.py (not a conftest.py: the suite imports its
top-level ``conftest`` by name, which a second conftest module would shadow).

torch-xla reads ``PJRT_DEVICE``/``CPU_NUM_DEVICES`` (4 virtual CPU devices) and
``XLA_FLAGS`` once, when its runtime starts; the partitioned HLO (with its
collectives) is only visible in the files ``--xla_dump_to`` writes.  So both are set
here, at collection time, before any test touches an XLA device.
"""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "4")
if "xla_dump_to" not in os.environ.get("XLA_FLAGS", ""):
    _dump = tempfile.mkdtemp(prefix="nx-xla-dump-")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={_dump}").strip()


def xla_dump_dir() -> str:
    for flag in os.environ.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_dump_to="):
            return flag.split("=", 1)[1]
    raise RuntimeError("XLA_FLAGS has no --xla_dump_to")


# torch's autograd engine sizes its per-device queues at the first backward; if torch-xla
# (SPMD mode, then its runtime) is not started by then, a later backward on XLA tensors hits an internal
# assert.  So where torch-xla is installed, set it up now, at collection, before any test
# of the suite runs a backward.
try:
    import torch_xla  # noqa: F401
except ImportError:
    pass
else:
    import torch

    from named_axes.parallel._xla import xla_device

    torch.zeros(1, device=xla_device()).cpu()   # SPMD mode first, then the runtime starts


def four_devices():
    """The first 4 XLA devices, for a test module's ``devices`` fixture; skips where fewer
    are set up."""
    import pytest
    from named_axes import parallel as P
    devs = P.devices("xla")
    if len(devs) < 4:
        pytest.skip(f"needs 4 XLA devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=4), got {len(devs)}")
    return devs[:4]
