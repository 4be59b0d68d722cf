"""nx.jit takes torch.compile's ``mode=`` / ``options=`` (inductor's own choices), and
compiling leaves the process as torch had it (no allocator or inductor changes)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import named_axes as nx


def _loss(w, x):
    return ((x @ w).tanh() ** 2).sum()


def test_options_reach_inductor_and_values_match():
    w, x = torch.randn(8, 4), torch.randn(16, 8)
    want = _loss(w, x)
    f = nx.jit(_loss, options={"cpp.simdlen": 0})    # inductor's own knob: no vector ISA
    torch.testing.assert_close(f(w, x), want)
    g = nx.jit(_loss, mode="default")
    torch.testing.assert_close(g(w, x), want)


def test_mode_and_options_are_inductors_only():
    with pytest.raises(nx.AxisTypeError, match="mode= and options= are inductor's"):
        nx.jit(_loss, backend="eager", mode="max-autotune")


def test_compiling_changes_no_process_setting():
    code = ("import torch, named_axes as nx\n"
            "from torch._inductor import cpu_vec_isa\n"
            "check = cpu_vec_isa.VecISA.check_build\n"
            "f = nx.jit(lambda x: (x.sin() ** 2).sum())\n"
            "f(torch.randn(64, 64))\n"
            "assert cpu_vec_isa.VecISA.check_build is check\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
