"""docs/migrating.md covers both sources with no blank rows (issue 15 item 2)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "docs" / "migrating.md").read_text()


def _tables() -> list[list[list[str]]]:
    tables, cur = [], []
    for line in TEXT.split("\n"):
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


def test_tables_without_blank_cells():
    tables = _tables()
    assert len(tables) == 3   # PyTorch named tensors, JAX, the translated tests' differences
    for t in tables:
        width = len(t[0])
        for row in t:
            assert len(row) == width and all(row), row


def test_pytorch_table_covers_the_named_tensor_api():
    first = " ".join(r[0] for r in _tables()[0])
    for op in ["names=", "Tensor.names", "rename(", "rename_", "refine_names", "align_to",
               "align_as", "flatten", "unflatten", "numel", "select", "unbind", "matmul",
               "out=", "autograd", "has_names", "torch.save"]:
        assert op in first, op


def test_jax_table_covers_the_seed_names():
    first = " ".join(r[0] for r in _tables()[1])
    for name in ["xmap", "in_axes", "out_axes", "axis_sizes", "axis_resources", "donate_argnums",
                 "backend", "Mesh", "SerialLoop", "psum", "pmean", "pmax", "pmin", "pdot",
                 "pshuffle", "ppermute", "all_gather", "all_to_all", "psum_scatter",
                 "axis_index", "pmap", "vmap", "jit", "disable_jit", "make_jaxpr",
                 "xla_computation", "eval_shape", "grad", "value_and_grad", "vjp", "jvp",
                 "linearize", "linear_transpose", "jacfwd", "jacrev", "hessian", "custom_vjp",
                 "custom_jvp", "closure_convert", "checkpoint", "remat", "named_call",
                 "vectorize", "devices", "local_devices", "device_count", "local_device_count",
                 "process_index", "device_put", "device_put_replicated", "device_put_sharded",
                 "device_get", "jax.numpy", "jnp.einsum", "jax.nn", "jax.scipy", "jax.random",
                 "tree_map", "spmd_axis_name", "static_broadcasted_argnums"]:
        assert name in first, name


def test_every_nx_name_in_the_tables_exists():
    import named_axes as nx

    for name in {n.rstrip(".") for n in re.findall(r"`nx\.([a-zA-Z_][\w.]*)", TEXT)}:
        obj = nx
        for part in name.split("."):
            assert hasattr(obj, part), name
            obj = getattr(obj, part)
