"""tests/oracle runs only when ``NX_ORACLE_JAX_PYTHON`` names the JAX 0.4.30 python
(``make test-oracle`` sets it); plain ``make test`` collects nothing here.

The oracle modules import each other by bare name (``import dsl``), as the JAX runner
(a script run under ``.venv-jax``) does, so this directory goes on ``sys.path``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if not os.environ.get("NX_ORACLE_JAX_PYTHON"):
    collect_ignore_glob = ["test_*.py"]



def pytest_terminal_summary(terminalreporter, config):
    """The per-class counts test_oracle.py left on ``config`` (``_nx_oracle_report``)."""
    lines = getattr(config, "_nx_oracle_report", None)
    if lines:
        terminalreporter.section("named_axes vs JAX 0.4.30 oracle")
        for line in lines:
            terminalreporter.write_line(line)
