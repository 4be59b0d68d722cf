"""Remember inductor's vector-ISA probes across processes.

Before its first C++ kernel, inductor checks which vector ISAs of the CPU (avx2,
avx512, avx512-bf16, amx, ...) its compiler can build *and load*: each check compiles a
test library (cached on disk) and starts a child Python to ``dlopen`` it
(``VecISA.check_build`` in ``torch._inductor.cpu_vec_isa``).  The answers are cached per
process only, so every fresh process pays them: about 0.9 s of ``nx.jit``'s first call
even when the compiled program itself comes from inductor's on-disk cache.

Here each check's answer is written next to that cache, keyed by the torch build, the
Python, the C++ compiler (path and modification time) and the CPU's flags, per ISA,
compiler flags and test code (successes only).  A later process with the same key reads the answer
instead of starting the child; any check not on record runs as before.  Inductor's own
configuration is not touched (it is part of its FX-graph cache key).  x86-64 Linux only
(the other platforms' checks start no processes).

>>> from named_axes.transforms import _isa_probe
>>> _isa_probe.before_compile() is None
True
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys

import torch

__all__ = ["before_compile", "after_compile"]

_FILE = "named_axes_vec_isa.json"
# installed: the check is wrapped; answers: (isa, flags, code) digest -> True for this
# environment; new: answers found in this process, not yet written; probed: checks run
_state: dict = {"installed": False, "key": None, "answers": {}, "new": False, "probed": 0}


def _environment_key() -> tuple[str, str]:
    from torch._inductor import cpu_vec_isa
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    cxx = get_cpp_compiler()
    try:
        stamp = os.stat(cxx).st_mtime_ns if os.path.isabs(cxx) else None
    except OSError:
        stamp = None
    raw = json.dumps([torch.__version__, sys.executable, cxx, stamp,
                      sorted(cpu_vec_isa.x86_isa_checker())])
    return hashlib.sha256(raw.encode()).hexdigest()[:32], os.path.join(cache_dir(), _FILE)


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def before_compile() -> None:
    """Wrap inductor's ISA check (once per process) to answer from the record."""
    if _state["installed"]:
        return None
    _state["installed"] = True
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        from torch._inductor.cpu_vec_isa import VecISA

        original = VecISA.check_build
        key, path = _environment_key()
    except Exception:   # an inductor without these internals: it probes as usual
        return None
    _state["key"], _state["path"] = key, path
    answers = _state["answers"] = dict(_read(path).get(key) or {})

    def check_build(self, code: str) -> bool:
        what = hashlib.sha256(f"{self}|{self._arch_flags}|{code}".encode()).hexdigest()[:24]
        if answers.get(what):
            return True
        _state["probed"] += 1
        ok = bool(original(self, code))
        if ok:   # a failure (a timeout, say) is checked again next time
            answers[what] = True
            _state["new"] = True
        return ok

    check_build.__doc__ = original.__doc__
    VecISA.check_build = check_build
    return None


def after_compile() -> None:
    """Write the answers this process found, for the processes after it."""
    if not _state["new"]:
        return
    _state["new"] = False
    path, key = _state["path"], _state["key"]
    try:
        data = _read(path)
        data[key] = _state["answers"]
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:   # a read-only cache directory only costs the probes
        pass
