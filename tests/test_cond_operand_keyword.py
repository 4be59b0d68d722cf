"""``nx.lax.cond`` takes JAX 0.4.30's ``operand=`` keyword (the one operand); it raised
Python's "unexpected keyword argument" TypeError.  Both positional operands and
``operand=`` is refused, as in JAX."""
from __future__ import annotations

import pytest
import torch

import named_axes as nx


def test_operand_keyword():
    f = nx.xmap(lambda x: nx.lax.cond(x > 1, lambda v: v * 2, lambda v: v, operand=x),
                in_axes=['i', ...], out_axes=['i', ...])
    assert f(torch.arange(3.)).tolist() == [0.0, 1.0, 4.0]      # JAX 0.4.30
    assert nx.lax.cond(False, lambda v: 2.0, lambda v: 1.0, operand=None) == 1.0


def test_operand_keyword_and_positional_operands_refused():
    with pytest.raises(nx.NamedAxisError, match="operand"):
        nx.lax.cond(True, lambda v: v, lambda v: v, torch.ones(1), operand=torch.ones(1))
