"""Every notebook runs top to bottom in a fresh kernel of this interpreter, without errors."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"xmap_tutorial", "per_example_grads", "transformer"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    nb = nbformat.read(path, as_version=4)
    # The kernel must be this interpreter (the .venv): ipykernel's built-in spec says
    # "python", which jupyter_client replaces by sys.executable.
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager

    argv = KernelSpecManager().get_kernel_spec(NATIVE_KERNEL_NAME).argv
    assert argv[0] in ("python", f"python{sys.version_info[0]}", sys.executable), argv
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=NATIVE_KERNEL_NAME,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
