"""Every script in examples/ runs (with short settings) and shows what it claims."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, steps: int = 60, timeout: int = 240) -> str:
    """Run from a working directory outside the repository: scripts find their data
    relative to themselves (``Path(__file__)``)."""
    env = dict(os.environ, NX_EXAMPLE_STEPS=str(steps), TQDM_DISABLE="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    with tempfile.TemporaryDirectory() as elsewhere:
        proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=elsewhere)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def loss_drop(out: str) -> tuple[float, float]:
    m = re.search(r"loss ([\d.]+) -> ([\d.]+)", out)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def test_tutorial_mlp():
    out = run_example("tutorial_mlp.py", steps=80)
    assert re.search(r"named loss ([\d.]+) == positional loss \1: True", out), out
    first, last = loss_drop(out)
    assert last < 0.6 * first, out
    acc = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    assert acc > 30.0, out


def test_per_example_grads():
    out = run_example("per_example_grads.py", steps=40)
    assert "per-example gradients match a loop over examples: True" in out, out
    assert "reduce_axes=('batch',) gives their sum: True" in out, out
    first, last = loss_drop(out)
    assert last < first, out


def test_transformer():
    out = run_example("transformer.py", steps=40)
    assert "named attention matches positional attention: True" in out, out
    first, last = loss_drop(out)
    assert last < first, out
    assert "sample:" in out, out
