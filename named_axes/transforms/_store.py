"""nx.jit's program store: compiled programs kept on disk, found again by what they do.

Opt-in (``NAMED_AXES_PROGRAM_STORE=DIR`` or :func:`set_program_store`).  ``nx.jit``
identifies a program without tracing it, by one eager call under a recording dispatch
mode (:class:`_Recorder`); the record's digest names an AOTInductor package
(``<digest>.pt2``) that loads without importing inductor or dynamo.  What a record
cannot pin down is not stored.  Like inductor's cache, the store must be a directory
only its user can write.  See docs/architecture.md ("The program store").

>>> import named_axes.transforms._store as store
>>> store.set_program_store(None) is None or True
True
"""
from __future__ import annotations

import atexit
import copy
import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import warnings
import weakref
from typing import Any, Callable, NamedTuple

import torch

from .._torch_private import (EagerDispatchMode, aoti_package, aoti_package_loader,
                              tree_flatten)
from .._version import __version__
from ._graph import TENSOR
from ._trace_probe import preserving_writes, storage_key, watching_modules, written_tensors
from ._tree import unbox

__all__ = ["set_program_store", "program_store", "flush", "ENV"]

ENV = "NAMED_AXES_PROGRAM_STORE"
_FORMAT = "2"
_MAX_CONSTANT = 64   # elements of a closed-over tensor recorded by value too
_state: dict = {"dir": os.environ.get(ENV) or None}
totals = {"loaded": 0, "saved": 0}   # programs loaded from stores / saved, this process


def set_program_store(path: str | os.PathLike | None) -> str | None:
    """Keep ``nx.jit``'s compiled programs in directory ``path`` (``None``: no store);
    returns the previous setting.  The default is ``$NAMED_AXES_PROGRAM_STORE``.

    >>> import named_axes as nx
    >>> before = nx.set_program_store(None)
    >>> nx.set_program_store(before) is None
    True
    """
    before = _state["dir"]
    _state["dir"] = None if path is None else os.fspath(path)
    return before


def program_store() -> str | None:
    """The directory ``nx.jit`` keeps compiled programs in, or ``None``."""
    return _state["dir"]


def available() -> bool:
    """Whether this torch can load AOTInductor packages."""
    return aoti_package_loader() is not None


class _Unstorable(Exception):
    """The identifying call did something a record cannot pin down."""


class _Recorder(EagerDispatchMode):
    """Records each operation of an eager call, its tensor arguments named by origin:
    ``i<k>`` the k-th input leaf, ``<n>.<k>`` the k-th result of the n-th operation,
    ``c<k>(...)`` the k-th closed-over tensor (its properties, and values when small)."""

    runs_values = True   # the library's eager paths run under it (see _modes)

    def __init__(self, inputs: list) -> None:
        super().__init__()
        self.lines: list = []
        self.outside: list = []   # leaf tensors from outside the call: (tensor, its .grad)
        self.closed_over: list = []   # tensors neither inputs nor made by the call
        self._refs: dict = {}
        self._outside_memory: set = set()   # storage_key of the inputs and closed-over
        for k, t in enumerate(inputs):
            self._from_outside(t, f"i{k}")
        self.why: str | None = None

    def _from_outside(self, t: torch.Tensor, name: str) -> None:
        self._name(t, name)
        self._outside_memory.add(storage_key(t))
        if t.is_leaf:   # only a leaf's .grad is set by a backward (and read without warning)
            self.outside.append((t, t.grad))

    def _name(self, t: torch.Tensor, name: str) -> None:
        self._refs[id(t)] = (weakref.ref(t), name)

    def _origin(self, t: torch.Tensor) -> str:
        ref = self._refs.get(id(t))
        if ref is not None and ref[0]() is t:
            return ref[1]
        if (t.device.type != "cpu" or t.layout != torch.strided
                or type(t) not in (torch.Tensor, torch.nn.Parameter)):
            raise _Unstorable(f"it closes over a {type(t).__name__} on {t.device}")
        k = len(self.closed_over)
        spec = f"{t.dtype},{tuple(t.shape)},{t.stride()},{t.requires_grad}"
        if t.numel() <= _MAX_CONSTANT:   # a literal's value shapes the program
            spec += "," + repr(t.detach().contiguous().view(-1).tolist())
        name = f"c{k}({spec})"
        self._from_outside(t, name)
        self.closed_over.append(t)
        return name

    def _describe(self, x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return self._origin(x)
        if isinstance(x, (list, tuple)):
            return "[" + ",".join(self._describe(v) for v in x) + "]"
        return repr(x)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.why is None:
            try:
                self._record(func, args, kwargs)
            except _Unstorable as e:
                self.why = str(e)
        out = func(*args, **kwargs)
        if self.why is None:
            n = len(self.lines) - 1
            results = []
            for k, o in enumerate(tree_flatten(out)[0]):
                if isinstance(o, torch.Tensor):
                    ref = self._refs.get(id(o))
                    if ref is None or ref[0]() is not o:   # in-place ops return an arg
                        self._name(o, f"{n}.{k}")
                    results.append(f"{o.dtype}{tuple(o.shape)}{o.stride()}")
                elif o is None:
                    results.append("None")
                else:   # a number or a bool made from values (is_nonzero, equal)
                    self.why = f"it reads a tensor's value ({func})"
            self.lines[-1] += " -> " + ",".join(results)
        return out

    def _record(self, func, args, kwargs) -> None:
        tags = getattr(func, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            raise _Unstorable(f"it draws random numbers ({func})")
        if torch.Tag.data_dependent_output in tags:
            raise _Unstorable(f"it reads a tensor's value ({func})")
        if torch.Tag.dynamic_output_shape in tags:
            raise _Unstorable(f"its result's shape depends on values ({func})")
        for t in written_tensors(func, args, kwargs):   # (through views too)
            if self._origin(t).startswith(("i", "c")) or \
                    storage_key(t) in self._outside_memory:
                raise _Unstorable(f"it updates a tensor in place ({func})")
        described = ",".join(self._describe(a) for a in args)
        if kwargs:
            described += ";" + ",".join(f"{k}={self._describe(v)}"
                                        for k, v in sorted(kwargs.items()))
        self.lines.append(f"{func}({described})")


class Identity(NamedTuple):
    """A program identified by its eager call: ``digest`` names it in the store;
    ``out_info`` (``trace_flat``'s) rebuilds its result from the flat tensor outputs;
    ``closed_over``: the tensors it read from outside, in the order it met them;
    ``modules``: the ``nn.Module``s it called."""
    digest: str
    out_info: list
    closed_over: list
    modules: tuple = ()


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor()


def _sources_digest() -> str:
    """The library's sources (read, not imported): its traced paths and compile rules
    make the stored program, so a changed library stores new ones."""
    h = hashlib.sha256()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()


@functools.cache
def _environment() -> str:
    """What besides the call makes its program: the versions, the sources, the CPU."""
    return repr((_FORMAT, torch.__version__, __version__, _sources_digest(),
                 torch.backends.cpu.get_cpu_capability(), platform.machine(), _cpu_flags()))


def identify(fun: Callable, args: tuple, leaves: list, call_key: Any) -> Identity | None:
    """Run ``fun(*args)`` once eagerly under the recorder; its :class:`Identity`, or
    ``None`` when the call cannot be stored (or raised: tracing will say why)."""
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if any(t.device.type != "cpu" for t in tensors):
        return None
    rng = torch.get_rng_state()
    recorder = _Recorder(tensors)
    modules: dict = {}
    try:
        with preserving_writes(), recorder, watching_modules(modules):
            result = fun(*args)
    except Exception:   # noqa: BLE001 - the traced call raises it again, or succeeds
        return None
    finally:
        torch.set_rng_state(rng)
        for t, grad in recorder.outside:   # a .backward() inside set these
            if t.grad is not grad:
                t.grad = grad
    if recorder.why is not None:
        return None
    o_leaves, o_spec, o_names = unbox(result)
    outs = [o for o in o_leaves if isinstance(o, torch.Tensor)]
    try:
        origins = [recorder._origin(o) for o in outs]
    except _Unstorable:
        return None
    if any(o.startswith(("i", "c")) for o in origins):   # a result aliasing an input
        return None
    consts = [TENSOR if isinstance(o, torch.Tensor) else o for o in o_leaves]
    record = "\n".join([_environment(), repr(call_key), repr(o_spec), repr(o_names),
                        repr(consts), ",".join(origins)] + recorder.lines)
    digest = hashlib.sha256(record.encode()).hexdigest()
    return Identity(digest, [o_spec, o_names, consts], recorder.closed_over,
                    tuple(modules.values()))


def load(ident: Identity, directory: str | None = None) -> Callable | None:
    """The stored program of ``ident`` as a boxed function (list of inputs -> outputs),
    or ``None`` when the store (``directory``, default: the current one) lacks it."""
    path = os.path.join(directory or _state["dir"], ident.digest + ".pt2")
    if not os.path.exists(path):
        return None
    try:
        with open(path[:-4] + ".json") as f:
            positions = json.load(f)["closed_over"]
        constants = [ident.closed_over[j] for j in positions]
        runner = aoti_package_loader()(path, "model", False, 1, -1)
    except (OSError, ValueError, LookupError, TypeError, RuntimeError) as e:
        # a damaged store: compile as usual
        warnings.warn(f"named_axes: the program store's {path} does not load ({e}); "
                      "compiling the program again", RuntimeWarning, stacklevel=3)
        return None
    totals["loaded"] += 1
    run = runner.run
    if not constants:
        return run
    return lambda args: run(args + constants)   # read on every call, as graph constants


def closed_over_positions(constants: list, ident: Identity) -> list | None:
    """Per tensor the graph closes over (``constants``, in graph order), its position
    among the tensors the identifying call met from outside; None when one is not among
    them (a tensor the trace made, e.g. a literal: not the eager call's object)."""
    where = {id(t): j for j, t in enumerate(ident.closed_over)}
    if any(id(t) not in where for t in constants):
        return None
    return [where[id(t)] for t in constants]


def _aoti_graph(gm: torch.fx.GraphModule, example: list) -> torch.fx.GraphModule:
    """``gm`` in aten ops, its collectives written as their plain code; raises
    :class:`_Unstorable` for what AOTInductor cannot take: an op with Python code, or a
    constant tensor the retrace made (``gm`` itself closes over none: nx.jit checks;
    AOTInductor would meet the real constant among its fake tensors)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ._backend import inline_collectives

    plain = inline_collectives(torch.fx.GraphModule(gm, copy.deepcopy(gm.graph)))
    decomposed = make_fx(plain, tracing_mode="fake")(*example)
    for node in decomposed.graph.nodes:
        if node.op == "get_attr":
            raise _Unstorable(f"its aten form holds a constant tensor ({node.target})")
        if node.op == "call_function" and getattr(node.target, "namespace", "aten") not in (
                "aten", "prims") and node.target.__module__ != "_operator":
            raise _Unstorable(f"it holds {node.target}, which AOTInductor does not take")
    return decomposed


# One inductor compile at a time: its configuration patches are process-wide.
compile_lock = threading.RLock()
_pending: list = []   # programs to save: (graph, input specs, identity, directory)


def save_later(gm: torch.fx.GraphModule, example: list, ident: Identity,
               positions: list) -> None:
    """Compile ``gm`` into the store under ``ident`` when the process exits (or at
    :func:`flush`): the call that traced it has its program already, the package serves
    later processes."""
    if not _pending:
        atexit.register(flush)
    _pending.append((gm, [(t.shape, t.stride(), t.dtype) for t in example], ident,
                     positions, _state["dir"]))


def flush() -> None:
    """Save the programs handed to the store now (also run at exit).

    >>> flush()
    """
    atexit.unregister(flush)
    while _pending:
        _save(*_pending.pop(0))


def _save(gm: torch.fx.GraphModule, specs: list, ident: Identity, positions: list,
          directory: str) -> None:
    try:
        with compile_lock, warnings.catch_warnings(), torch.no_grad():
            # AOTInductor deep-copies its own graph, whose input spec holds a LeafSpec,
            # and copying one warns of LeafSpec's deprecation (torch-internal)
            warnings.filterwarnings("ignore", message=r".isinstance\(treespec, LeafSpec\)",
                                    category=FutureWarning)
            _compile_into(gm, specs, ident, positions, directory)
    except _Unstorable as e:
        warnings.warn(f"named_axes: the program store cannot hold a program: {e}; later "
                      "processes will compile it again", RuntimeWarning, stacklevel=1)
    except Exception as e:   # noqa: BLE001 - the process has its program; only the copy failed
        warnings.warn(f"named_axes: the program store could not save a program ({e}); "
                      "later processes will compile it again", RuntimeWarning, stacklevel=1)


def _compile_into(gm: torch.fx.GraphModule, specs: list, ident: Identity, positions: list,
                  directory: str) -> None:
    """Compile ``gm`` with AOTInductor into the store ``directory`` under ``ident``
    (``positions``: see :func:`closed_over_positions`)."""
    from ._backend import lift_constants

    gm, constants = lift_constants(gm)
    stray = next((n.target for n in gm.graph.nodes if n.op == "get_attr"), None)
    if stray is not None:   # positions count tensors only
        raise _Unstorable(f"it holds a {type(getattr(gm, stray)).__name__} attribute ({stray})")
    example = [torch.empty_strided(shape, stride, dtype=dtype) for shape, stride, dtype in specs]
    example += [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype) for t in constants]
    graph = _aoti_graph(gm, example)
    os.makedirs(directory, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".compiling-", dir=directory)
    try:
        built = aoti_package(graph, tuple(example), os.path.join(work, "program.pt2"))
        # atomic, the package last: a reader sees the whole program or none
        with open(os.path.join(work, "program.json"), "w") as f:
            json.dump({"closed_over": positions}, f)
        os.replace(os.path.join(work, "program.json"),
                   os.path.join(directory, ident.digest + ".json"))
        os.replace(built, os.path.join(directory, ident.digest + ".pt2"))
        totals["saved"] += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
