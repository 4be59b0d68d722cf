"""`make demo` / `make test` say what they install and show progress (issue 15 item 6)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

MAKEFILE = (Path(__file__).resolve().parent.parent / "Makefile").read_text()


def _rule(target: str) -> str:
    m = re.search(rf"^{re.escape(target)}:.*?(?=^\S|\Z)", MAKEFILE, re.M | re.S)
    assert m, target
    return m.group(0)


def test_installs_are_not_silent():
    for target in ("$(STAMP)", "$(XSTAMP)"):
        rule = _rule(target)
        assert "pip install" in rule
        assert " -q" not in rule, f"{target}: pip -q hides minutes of downloads"
        assert "echo" in rule, f"{target}: say what is being installed"
    assert "--progress-bar on" in MAKEFILE


def test_demo_and_test_announce_themselves():
    assert "echo" in _rule("demo") and "echo" in _rule("test")
    assert "--durations" in _rule("test")


@pytest.mark.distributed
def test_distributed_tests_run_as_one_xdist_group(request):
    """Under ``make test``'s ``--dist loadgroup`` every test that starts process groups
    is in one group, so one worker runs them one at a time (tests/conftest.py).  With a
    pytest whose node ids xdist cannot suffix (9.2), the group was silently lost: two
    4-rank launches side by side, and a module's ranks launched once per worker."""
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@distributed"), request.node.nodeid
