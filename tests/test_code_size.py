"""The library stays readable in pieces (issue 30): no module over 500 lines, no function
over 60 (its ``def`` to its last line, nested functions included)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "named_axes"
MAX_MODULE, MAX_FUNCTION = 500, 60


def _sources():
    return sorted(PKG.rglob("*.py"))


def test_no_module_over_the_limit():
    long = [f"{p.relative_to(PKG)}: {n}" for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE]
    assert not long, f"modules over {MAX_MODULE} lines: {long}"


def test_no_function_over_the_limit():
    long = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    long.append(f"{p.relative_to(PKG)}:{node.lineno} {node.name}: {n}")
    assert not long, f"functions over {MAX_FUNCTION} lines: {long}"
