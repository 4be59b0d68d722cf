"""Every notebook runs top to bottom in a fresh kernel of this interpreter, without errors,
and (on the dev environment's torch, which wrote them) prints what its committed outputs say."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_do_not_depend_on_the_working_directory(path):
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            assert "Path.cwd()" not in cell.source and "'../" not in cell.source, cell.source


def test_there_are_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"xmap_tutorial", "per_example_grads", "transformer"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch, tmp_path):
    """Run from a working directory outside the repository: notebooks find their data
    relative to the package (``Path(nx.__file__)``), never ``Path.cwd()``."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    nb = nbformat.read(path, as_version=4)
    committed = _text_outputs(nb)
    # The kernel must be this interpreter (the .venv): ipykernel's built-in spec says
    # "python", which jupyter_client replaces by sys.executable.
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager

    argv = KernelSpecManager().get_kernel_spec(NATIVE_KERNEL_NAME).argv
    assert argv[0] in ("python", f"python{sys.version_info[0]}", sys.executable), argv
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=NATIVE_KERNEL_NAME,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors

    import torch

    if torch.__version__.startswith("2.13."):   # the committed outputs come from torch 2.13
        fresh = _text_outputs(nb)
        assert fresh == committed, _first_difference(committed, fresh)


_VOLATILE = [
    (re.compile(r"<Figure size [^>]*>"), "<Figure>"),                 # backend-dependent
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|µs|it/s|s/it)\b"), "<time>"),   # wall-clock timings
    (re.compile(r"\r[^\n]*"), ""),                                   # progress-bar redraws
]


def _text_outputs(nb) -> dict:
    """Per code cell, its printed text and text results, with timings and figures masked."""
    out = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                parts.append(o.get("text", ""))
            elif "text/plain" in o.get("data", {}):
                parts.append(o["data"]["text/plain"])
        text = "".join(parts)
        for pattern, repl in _VOLATILE:
            text = pattern.sub(repl, text)
        out[i] = text.replace("<Figure>", "").strip()
    return out


def _first_difference(committed: dict, fresh: dict) -> str:
    for i in committed:
        if committed[i] != fresh.get(i):
            return (f"cell {i} printed something else than its committed output; re-run "
                    f"notebooks/_build.py if the change is intended.\ncommitted:\n"
                    f"{committed[i]}\nfresh:\n{fresh.get(i)}")
    return "the notebooks' cells changed"
