"""None among a traced program's results stays None (closure_convert, make_graph); found
while merging nx.jit's modules."""
import torch

import named_axes as nx


def test_closure_convert_keeps_a_none_among_the_results():
    # a None result leaf was taken for a tensor output: StopIteration, or the tensors
    # shifted onto the wrong leaves
    f, consts = nx.closure_convert(lambda x: (None, x * 2, {"n": None, "y": x + 1}),
                                   torch.ones(2))
    none, y2, d = f(torch.ones(2), *consts)
    assert none is None and d["n"] is None
    assert torch.equal(y2, torch.full((2,), 2.0)) and torch.equal(d["y"], torch.full((2,), 2.0))


def test_make_graph_names_only_tensor_outputs():
    g = nx.make_graph(lambda x: (None, x * 2))(torch.ones(2))
    assert g.out_names == [None]
