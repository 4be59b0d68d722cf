"""Every docstring example in the library runs (on CPU) and prints what it says."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import named_axes

# Engines whose examples need hardware or a process group are exercised in their own tests.
_SKIP = ("named_axes.parallel._xla", "named_axes.parallel._dtensor")


def _modules():
    names = ["named_axes"]
    for info in pkgutil.walk_packages(named_axes.__path__, "named_axes."):
        if info.name not in _SKIP:
            names.append(info.name)
    return names


@pytest.mark.parametrize("modname", _modules())
def test_docstring_examples(modname):
    module = importlib.import_module(modname)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {modname}"
