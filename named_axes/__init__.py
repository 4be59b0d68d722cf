"""named_axes: JAX's xmap named-axis programming model for PyTorch.

Write a function once with named axes (``batch``, ``heads``, ``hidden``), then decide
how it runs — vectorized on one device, split over a mesh of devices, or in serial
chunks — without rewriting it.  See ``docs/guide.md``.

>>> import torch, named_axes as nx
>>> def norm_rows(x):                    # x: positional (features,), named {'batch'}
...     return x / x.sum()
>>> f = nx.xmap(norm_rows, in_axes=['batch', ...], out_axes=['batch', ...])
>>> f(torch.ones(2, 4))
tensor([[0.2500, 0.2500, 0.2500, 0.2500],
        [0.2500, 0.2500, 0.2500, 0.2500]])
"""
from __future__ import annotations

# -- core: named tensors, the dispatcher, xmap ----------------------------------------
from ._errors import (AxisResourceError, AxisSizeError, AxisSpecError, AxisTypeError,
                      NamedAxisError, RandomnessError, UnboundAxisError)
from ._tensor import NamedTensor
from ._dispatch import ShapeError
from . import rules as _rules
from . import _naming

_rules.install()
_naming.attach()
from ._layout import named, positional
from ._xmap import xmap
from ._plancache import clear_caches
from ._functions import (all, amax, amin, any, argmax, argmin, log_softmax, logsumexp, max,
                         mean, min, norm, prod, softmax, std, sum, var)
from ._interop import collate  # DataLoader collation, torch.load safe globals, numpy interop
# explicit opt-ins that change torch (import named_axes changes nothing in torch)
from .transforms._torch_func import disable_torch_func, enable_torch_func
from ._compile_compat import disable_dynamo_matmul, enable_dynamo_matmul

from ._version import __version__

__all__ = [
    "NamedTensor", "named", "positional", "xmap",
    "sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "logsumexp",
    "softmax", "log_softmax", "var", "std", "all", "any", "norm",
    "NamedAxisError", "AxisSizeError", "AxisSpecError", "AxisResourceError", "AxisTypeError",
    "UnboundAxisError", "ShapeError", "RandomnessError", "collate",
    "enable_torch_func", "disable_torch_func", "enable_dynamo_matmul", "disable_dynamo_matmul",
    "clear_caches",
]

# -- named ops & collectives (einsum, one_hot, nx.lax, nx.nn) ---------------------------
from ._einsum import einsum  # also registers the torch.einsum rule
from ._one_hot import one_hot
from . import lax, nn
from . import _einops as _einops_module

_einops_module.install()
__all__ += ["einsum", "one_hot", "lax", "nn"]

# -- transformations (vmap, grad family, jit, make_graph, ...) --------------------------
from .transforms import (NamedGraphModule, ShapeDtypeStruct, checkpoint, closure_convert,
                         custom_jvp, custom_vjp, disable_jit, eval_shape, grad, hessian,
                         jacfwd, jacrev, jit, jvp, linear_transpose, linearize, make_graph,
                         named_call, remat, set_program_store, value_and_grad, vectorize,
                         vjp, vmap)

__all__ += ["vmap", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev",
            "hessian", "linear_transpose", "custom_vjp", "custom_jvp", "closure_convert",
            "checkpoint", "remat", "eval_shape", "ShapeDtypeStruct", "make_graph",
            "NamedGraphModule", "named_call", "jit", "disable_jit", "set_program_store",
            "vectorize"]

# -- parallelism (Mesh, SerialLoop, pmap, devices, resource planning) -------------------
from .parallel import (Mesh, NamedSharding, PartitionSpec, Rates, SerialLoop, calibrate,
                       device_count, device_get, device_put, device_put_replicated,
                       device_put_sharded, devices, explain_resources, local_device_count,
                       local_devices, make_array_from_callback,
                       make_array_from_process_local_data, mesh, plan_resources, process_count,
                       process_index)
from ._pmap import pmap
from . import _calibrate  # noqa: F401  (nx.calibrate times named programs too)

__all__ += ["Mesh", "mesh", "SerialLoop", "pmap", "devices", "local_devices", "device_count",
            "local_device_count", "process_index", "process_count", "device_put",
            "device_put_replicated", "device_put_sharded", "device_get", "NamedSharding",
            "PartitionSpec", "make_array_from_process_local_data", "make_array_from_callback",
            "plan_resources", "explain_resources", "calibrate", "Rates"]
