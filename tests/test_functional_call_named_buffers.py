"""nx.nn.functional_call with named buffer values: a forward that reassigns a buffer
(self.count = self.count + 1) reads the new value afterwards, the module keeps its own
buffer, and the given dict gets the new value -- per instance as torch.func.functional_call
gives it in a loop.  A named buffer used to be an instance attribute shadowing the
module's: the reassignment went into the module for good (a NamedTensor buffer) and later
reads in the forward got the stale value."""
from __future__ import annotations

import torch
from torch import nn

import named_axes as nx


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        self.count = self.count + 1
        return self.lin(x) * self.count


def test_reassigned_named_buffer_matches_the_loop():
    torch.manual_seed(0)
    m, x = _Counter(), torch.randn(3, 2)
    counts = torch.tensor([5., 6., 7.])
    given = {"count": nx.named(counts.clone(), ['a'])}
    got = nx.xmap(lambda x, c: nx.nn.functional_call(m, given | {"count": c}, (x,)),
                  in_axes=(['a', ...], ['a']), out_axes=['a', ...])(x, counts)
    want, ends = [], []
    for i in range(3):
        d = {"count": counts[i].clone()}
        want.append(torch.func.functional_call(m, d, (x[i],)))
        ends.append(d["count"])
    torch.testing.assert_close(got, torch.stack(want))
    assert type(m.count) is torch.Tensor and m.count.item() == 0.
    out = nx.nn.functional_call(m, given, (x,))    # outside xmap: the dict gets the new value
    torch.testing.assert_close(nx.positional(given["count"], ['a']), torch.stack(ends))
    with torch.no_grad():
        torch.testing.assert_close(nx.positional(out, ['a', ...]).detach(),
                                   torch.stack([m.lin(x) * (c + 1) for c in counts]))
    assert type(m.count) is torch.Tensor and m.count.item() == 0.
