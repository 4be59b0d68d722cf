"""Under torch.compile, ``_draws.draws`` answers by name (dynamo cannot trace torch's tag
lookup, ``OpOverloadPacket.overloads``): nx.vmap's randomness mode inside a compiled
xmap made ``torch.compile(fullgraph=True)`` fail on the library's own ``torch.empty``
(the JAX oracle's p0_00307: vmap of ``axis_index('v') * y``).  The name table must stay
the tag rule's answer."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from named_axes import _draws

OWNERS = (torch, torch.Tensor, F, torch.special, torch.nn.init)


def _random_names() -> set:
    names = set()
    for owner in OWNERS:
        for n in dir(owner):
            f = getattr(owner, n, None)
            if callable(f) and (not n.startswith("_") or n in _draws.RANDOM_NAMES):
                if _draws.draws(f) is True:
                    names.add(n)
    return names


def test_the_name_table_is_the_tag_rule():
    assert _random_names() == set(_draws.RANDOM_NAMES)


_PROGRAM = """
import torch, named_axes as nx
body = lambda x: nx.vmap(lambda y: nx.lax.axis_index('v') * y, axis_name='v',
                         randomness=%r)(x)
f = nx.xmap(body, in_axes=[...], out_axes=[...])
x = torch.arange(3.)
got = torch.compile(f, fullgraph=True)(x)   # (first: nothing cached by an eager call)
torch.testing.assert_close(got, f(x))
torch.testing.assert_close(got, x * torch.arange(3.))
"""


@pytest.mark.parametrize("randomness", ["error", "same", "different"])
def test_vmap_of_axis_index_compiles_with_fullgraph(randomness):
    # in a fresh process: the first draws() of the library's torch.empty is in the trace
    run = subprocess.run([sys.executable, "-c", _PROGRAM % randomness], capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
