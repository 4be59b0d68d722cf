"""One cache policy for every plan named_axes remembers.

A *plan* is what an op works out once per layout signature (its operands' names and
ranks, a spec string).  A :class:`PlanCache` is keyed by a hashable signature (an
unhashable one is not cached) and left alone while dynamo traces (it would guard on the
dict); a hit failing ``validate(plan, *args)`` is rebuilt, so that the rebuild raises the
user's error; a full cache starts over.

>>> from named_axes._plancache import PlanCache
>>> squares = PlanCache("squares", lambda n: n * n, maxsize=2)
>>> squares(3), squares(3), len(squares)
(9, 9, 1)
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Callable

__all__ = ["PlanCache", "clear_caches"]

_MISSING = object()
CACHES: weakref.WeakSet = weakref.WeakSet()   # every live PlanCache, for clear_caches


def _compiling_before_torch() -> bool:
    """Whether dynamo is tracing; binds ``compiling`` to torch's check once torch is
    imported (axis-spec parsing runs before torch is)."""
    global compiling
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "compiler"):
        return False
    compiling = torch.compiler.is_dynamo_compiling
    return compiling()


compiling = _compiling_before_torch


class PlanCache:
    """``cache.plan(key, *args)`` is ``build(*args)``, remembered per ``key``;
    ``cache(*args)`` uses ``args`` as the key.  ``lookup`` and ``store`` serve a cache with
    no ``build``: plans made as a side effect of a checked run (an xmap call), read by a
    fast lane whose miss goes to the general path."""

    __slots__ = ("name", "build", "maxsize", "validate", "plans", "__weakref__")

    def __init__(self, name: str, build: Callable | None = None, maxsize: int = 4096,
                 validate: Callable | None = None) -> None:
        self.name = name
        self.build = build
        self.maxsize = maxsize
        self.validate = validate
        self.plans: dict = {}
        if not compiling():   # one made while dynamo traces is never used (and dynamo
            CACHES.add(self)  # cannot always trace WeakSet.add)

    def plan(self, key: Any, *args) -> Any:
        if compiling():
            return self.build(*args)
        try:
            plan = self.plans.get(key, _MISSING)
        except TypeError:   # an unhashable key: no caching
            return self.build(*args)
        if plan is _MISSING or (self.validate is not None and not self.validate(plan, *args)):
            plan = self.build(*args)   # raises on bad input
            self.store(key, plan)
        return plan

    def __call__(self, *args) -> Any:
        return self.plan(args, *args)

    def lookup(self, key: Any) -> Any:
        """The remembered plan for ``key`` or None (not validated)."""
        if compiling():
            return None
        try:
            return self.plans.get(key)
        except TypeError:
            return None

    def store(self, key: Any, plan: Any) -> None:
        if compiling():
            return
        plans = self.plans
        if len(plans) >= self.maxsize:
            plans.clear()
        try:
            plans[key] = plan
        except TypeError:
            pass

    def clear(self) -> None:
        self.plans.clear()

    def __len__(self) -> int:
        return len(self.plans)

    def __repr__(self) -> str:
        return f"PlanCache({self.name!r}, {len(self.plans)}/{self.maxsize} plans)"


def clear_caches() -> None:
    """Forget every plan named_axes remembers (``nx.clear_caches``, as ``jax.clear_caches``):
    results never depend on them.  ``nx.jit`` programs go with their jitted function.

    >>> import torch, named_axes as nx
    >>> f = nx.xmap(lambda x: x * 2, in_axes=['i', ...], out_axes=['i', ...])
    >>> before = f(torch.ones(2))
    >>> nx.clear_caches()
    >>> torch.equal(f(torch.ones(2)), before)
    True
    """
    for cache in CACHES:
        cache.clear()
