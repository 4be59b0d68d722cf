"""Docs that cannot rot (issue 15 item 5): every ```python block of README.md and docs/*.md
runs, and every docs/errors.md entry raises the message it quotes.

A block runs on its own, in a fresh namespace, unless an HTML comment on the line before
its fence says otherwise:

- ``<!-- continues -->``: runs in the namespace of the block before it (same file);
- ``<!-- torchrun: 4 -->``: runs as a script under ``torchrun --nproc-per-node=4`` (gloo,
  the ``distributed`` tests);
- ``<!-- skip: reason -->``: not run (the reason is reported).

docs/errors.md: each ```python block (with the catalogue's preamble) must raise, and its
``Type (a Base): message`` block below is compared with what the code raised, exactly.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
ERRORS = ROOT / "docs" / "errors.md"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_MARK = re.compile(r"^\s*<!--\s*(?P<kind>continues|skip|torchrun)\s*:?\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int            # 1-based line of the opening fence
    lang: str
    code: str
    mark: str = ""       # '', 'continues', 'skip', 'torchrun'
    arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group("indent"), m.group("lang")
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = _MARK.match(lines[k]) if k >= 0 else None
        out.append(Block(path, i + 1, lang, "\n".join(body) + "\n",
                         mk.group("kind") if mk else "", mk.group("arg") if mk else ""))
        i = j + 1
    return out


def programs() -> list[list[Block]]:
    """Runnable units: a block and the ``continues`` blocks after it."""
    progs: list[list[Block]] = []
    for path in DOCS:
        if path == ERRORS:
            continue
        for b in blocks(path):
            if b.lang != "python":
                continue
            if b.mark == "continues":
                assert progs and progs[-1][0].path == path, f"{b.where}: nothing to continue"
                progs[-1].append(b)
            else:
                progs.append([b])
    return progs


PROGRAMS = programs()


def test_every_python_block_is_collected():
    n = sum(1 for p in DOCS if p != ERRORS for b in blocks(p) if b.lang == "python")
    assert n == sum(len(p) for p in PROGRAMS) and n >= 5


@pytest.mark.timeout(600)
@pytest.mark.parametrize("prog", [p for p in PROGRAMS if p[0].mark != "torchrun"],
                         ids=lambda p: p[0].where)
def test_doc_block_runs(prog, monkeypatch):
    first = prog[0]
    if first.mark == "skip":
        pytest.skip(f"{first.where}: {first.arg or 'marked skip'}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(ROOT)
    import torch

    dtype = torch.get_default_dtype()
    ns: dict = {"__name__": "__main__"}
    try:
        for b in prog:
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(compile(b.code, b.where, "exec"), ns)
                except Exception as e:
                    raise AssertionError(f"{b.where} failed: {type(e).__name__}: {e}") from e
    finally:
        torch.set_default_dtype(dtype)


_EXIT_AFTER_BLOCK = ("\nimport os as _os, sys as _sys\n"
                     "_sys.stdout.flush(); _sys.stderr.flush(); _os._exit(0)\n")


@pytest.mark.distributed
@pytest.mark.timeout(600)
@pytest.mark.parametrize("prog", [p for p in PROGRAMS if p[0].mark == "torchrun"],
                         ids=lambda p: p[0].where)
def test_doc_block_runs_under_torchrun(prog, tmp_path):
    import socket

    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    nproc = int(prog[0].arg.split()[0])
    script = tmp_path / "block.py"
    # Once the block has run to its end, leave without C++ static destructors: gloo's
    # worker threads have been seen to abort at interpreter exit ('terminate called
    # without an active exception', SIGABRT) after a clean destroy_process_group, failing
    # a block that succeeded on every rank (as tests/parallel/_ranks.py does)
    script.write_text("".join(b.code for b in prog) + _EXIT_AFTER_BLOCK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={port}", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, f"{prog[0].where}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


# -- docs/errors.md ---------------------------------------------------------------------------

_PREAMBLE = ("import torch, numpy as np, named_axes as nx\n"
             "from named_axes import parallel as P\n"
             "ident = lambda x: x\n")
_EXPECT = re.compile(r"^(?P<kind>\w+) \(an? (?P<base>[\w, ]+?)\): (?P<msg>.*)$", re.S)


def error_entries() -> list[tuple[Block, Block]]:
    bs = blocks(ERRORS)
    pairs = []
    for a, b in zip(bs, bs[1:]):
        if a.lang == "python" and b.lang == "":
            pairs.append((a, b))
    return pairs


ENTRIES = error_entries()


def test_errors_md_has_entries():
    n_python = sum(1 for b in blocks(ERRORS) if b.lang == "python")
    assert len(ENTRIES) == n_python >= 30


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[0].where)
def test_errors_md_entry_raises_the_quoted_message(entry):
    code, expected = entry
    if code.mark == "skip":
        pytest.skip(f"{code.where}: {code.arg or 'marked skip'}")
    m = _EXPECT.match(expected.code.strip())
    assert m, f"{expected.where}: expected 'Type (a Base): message', got {expected.code!r}"
    import builtins

    import named_axes as nx

    ns: dict = {}
    exec(compile(_PREAMBLE, "<preamble>", "exec"), ns)
    try:
        exec(compile(textwrap.dedent(code.code), code.where, "exec"), ns)
    except Exception as e:   # noqa: BLE001 - the point is to see what it raises
        kind = type(e).__name__
        assert kind == m.group("kind"), f"{code.where}: raised {kind}: {e}"
        for base in m.group("base").replace(",", " ").split():
            assert isinstance(e, getattr(builtins, base, None) or getattr(nx, base)), base
        assert str(e) == m.group("msg").strip(), (
            f"{code.where}: the message differs from the one quoted\nquoted: "
            f"{m.group('msg').strip()}\nraised: {e}")
    else:
        pytest.fail(f"{code.where}: raised nothing")
