"""Axis specs: reading ``in_axes`` / ``out_axes`` mappings and matching pytree prefixes.

Pure Python (no torch import).  A mapping names some positional axes of one array:

- a dict ``{pos: name}`` whose keys are all ints (or that is empty), negative positions allowed;
- a list or tuple of names ending with ``...``: names the leading axes;
- a string ``'batch seq ...'``: the same, space separated (a trailing ``...`` is optional);
- ``None``: names nothing (like ``{}``).

Any other list/tuple/dict is a *container* of specs (a pytree prefix).

>>> parse_mapping(['batch', 'seq', ...]).entries
((0, 'batch'), (1, 'seq'))
>>> parse_mapping({-1: 'feat'}).resolve(3, what='argument 0')
((2, 'feat'),)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from ._errors import AxisSpecError, AxisTypeError

__all__ = ["AxisMapping", "is_mapping", "parse_mapping", "check_name", "match_prefix", "path_str"]


def check_name(name: Any, *, where: str) -> Hashable:
    """Reject names that are not hashable or that would be confused with positions."""
    if type(name) is str:   # the usual case; also spares dynamo (2.9) a hash() it cannot trace
        return name
    if name is Ellipsis or name is None:
        raise AxisTypeError(f"{where}: {name!r} is not a valid axis name")
    if isinstance(name, (bool, int)):
        raise AxisTypeError(
            f"{where}: axis name {name!r} is an int, which is ambiguous with a positional "
            f"dimension; use a string or another hashable non-int name"
        )
    try:
        hash(name)
    except TypeError:
        raise AxisTypeError(f"{where}: axis name {name!r} is not hashable") from None
    return name


@dataclass(frozen=True)
class AxisMapping:
    """A parsed axis mapping: ``entries`` are ``(position, name)`` pairs as the user gave them."""

    entries: tuple
    spelling: str

    @property
    def names(self) -> tuple:
        return tuple(name for _, name in self.entries)

    def resolve(self, ndim: int, *, what: str) -> tuple:
        """Positions normalized against ``ndim``, sorted by position.

        Raises AxisSpecError when a position is out of range or two names share one.
        """
        out = []
        seen: dict = {}
        for pos, name in self.entries:
            p = pos + ndim if pos < 0 else pos
            if not 0 <= p < ndim:
                raise AxisSpecError(
                    f"{what}: axis mapping {self.spelling} puts {name!r} at position {pos}, "
                    f"but the value has only {ndim} positional dimension(s)"
                )
            if p in seen:
                raise AxisSpecError(
                    f"{what}: axis mapping {self.spelling} maps position {pos} to both "
                    f"{seen[p]!r} and {name!r}"
                )
            seen[p] = name
            out.append((p, name))
        return tuple(sorted(out))


def is_mapping(spec: Any) -> bool:
    """Whether ``spec`` is one axis mapping (as opposed to a container of specs)."""
    if spec is None or isinstance(spec, str):
        return True
    if isinstance(spec, (list, tuple)):
        return len(spec) > 0 and spec[-1] is Ellipsis
    if isinstance(spec, dict):
        if any(isinstance(k, bool) for k in spec):
            raise AxisTypeError(f"axis mapping {spec!r}: {next(k for k in spec if isinstance(k, bool))!r} "
                                f"is not a position (positions are ints)")
        return all(isinstance(k, int) for k in spec)
    return False


_CACHE: dict = {}


def compiling() -> bool:
    """Whether dynamo is tracing (torch is looked up only if something imported it)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def _parse_hashable(kind: str, payload: tuple, spelling: str) -> AxisMapping:
    # a plain dict cache: dynamo warns about (and ignores) functools.lru_cache; keyed
    # by spelling too, which error messages quote ([...] and None parse alike)
    if compiling():
        # dynamo (torch 2.9) cannot hash the cache's keys when names are odd objects;
        # it traces this once per graph anyway
        return _parse_uncached(kind, payload, spelling)
    key = (kind, payload, spelling)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _parse_uncached(kind, payload, spelling)
    return hit


def _parse_uncached(kind: str, payload: tuple, spelling: str) -> AxisMapping:
    where = f"axis mapping {spelling}"
    if kind == "dict":
        entries = tuple((pos, check_name(name, where=where)) for pos, name in payload)
    else:
        entries = tuple((i, check_name(name, where=where)) for i, name in enumerate(payload))
    names = [n for _, n in entries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AxisSpecError(f"{where} names axis {sorted(map(repr, dup))[0]} more than once")
    if kind == "dict":
        positions = [p for p, _ in entries]
        if len(set(positions)) != len(positions):
            raise AxisSpecError(f"{where} repeats a position")
    return AxisMapping(entries, spelling)


def parse_mapping(spec: Any) -> AxisMapping:
    """Parse one axis mapping (see the module docstring for the forms)."""
    if isinstance(spec, AxisMapping):
        return spec
    if spec is None:  # JAX users write None for an argument with nothing to name
        return _parse_hashable("list", (), "None")
    spelling = repr(spec)
    try:
        if isinstance(spec, str):
            words = spec.split()
            if words and words[-1] == "...":
                words = words[:-1]
            if "..." in words:
                raise AxisSpecError(f"axis mapping {spelling}: '...' may only come last")
            return _parse_hashable("list", tuple(words), spelling)
        if isinstance(spec, dict) and is_mapping(spec):
            return _parse_hashable("dict", tuple(sorted(spec.items())), spelling)
        if isinstance(spec, (list, tuple)) and is_mapping(spec):
            body = tuple(spec[:-1])
            if any(n is Ellipsis for n in body):
                raise AxisSpecError(f"axis mapping {spelling}: ... may only come last")
            return _parse_hashable("list", body, spelling)
    except TypeError:
        # unhashable names reach lru_cache first: report them properly
        for name in (spec.values() if isinstance(spec, dict) else list(spec)[:-1]):
            check_name(name, where=f"axis mapping {spelling}")
        raise
    raise AxisSpecError(f"{spelling} is not an axis mapping (a dict {{pos: name}}, "
                        f"a list of names ending with ..., or a string 'a b ...')")


def path_str(path: tuple) -> str:
    """Spell a pytree path: ``(1, 'w') -> "argument 1['w']"``."""
    if not path:
        return "the value"
    head, rest = path[0], path[1:]
    s = f"argument {head}" if isinstance(head, int) else f"[{head!r}]"
    return s + "".join(f"[{p!r}]" for p in rest)


def match_prefix(
    spec: Any,
    tree: Any,
    is_leaf: Callable[[Any], bool],
    *,
    what: str,
    path: tuple = (),
) -> list:
    """Pair every leaf of ``tree`` with the axis mapping that covers it.

    ``spec`` is a pytree prefix of ``tree`` whose leaves are axis mappings; a mapping
    covers its whole subtree.  Returns ``[(path, leaf, AxisMapping), ...]`` in
    flattening order.  Containers are tuples, lists and dicts (namedtuples as tuples).
    """
    if is_mapping(spec):
        mapping = parse_mapping(spec)
        return [(p, leaf, mapping) for p, leaf in _leaves(tree, is_leaf, path)]
    if isinstance(spec, (tuple, list)):
        if is_leaf(tree) or not isinstance(tree, (tuple, list)):
            raise AxisSpecError(
                f"{what}: the spec at {path_str(path)} is a {type(spec).__name__} of "
                f"{len(spec)} specs, but the value there is {_kind(tree)}"
            )
        if len(spec) != len(tree) and not path:
            raise AxisSpecError(
                f"{what}: the spec has {len(spec)} entries but the call has {len(tree)} "
                f"arguments; give one axis mapping per argument, or a single mapping for all")
        if len(spec) != len(tree):
            raise AxisSpecError(
                f"{what}: the spec at {path_str(path)} has {len(spec)} entries but the value "
                f"there has {len(tree)}; give one axis mapping per element, or a single "
                f"mapping for all of them"
            )
        out = []
        for i, (s, t) in enumerate(zip(spec, tree)):
            out += match_prefix(s, t, is_leaf, what=what, path=path + (i,))
        return out
    if isinstance(spec, dict):
        if not isinstance(tree, dict):
            raise AxisSpecError(
                f"{what}: the spec at {path_str(path)} is a dict with keys "
                f"{sorted(map(repr, spec))}, but the value there is {_kind(tree)}"
            )
        if set(spec) != set(tree):
            raise AxisSpecError(
                f"{what}: the spec at {path_str(path)} has keys {sorted(map(repr, spec))} "
                f"but the value has keys {sorted(map(repr, tree))}"
            )
        out = []
        for k in tree:
            out += match_prefix(spec[k], tree[k], is_leaf, what=what, path=path + (k,))
        return out
    raise AxisSpecError(
        f"{what}: {spec!r} at {path_str(path)} is neither an axis mapping nor a container "
        f"of them"
    )


def _kind(tree: Any) -> str:
    if isinstance(tree, (tuple, list, dict)):
        return f"a {type(tree).__name__} of {len(tree)}"
    return f"a single {type(tree).__name__}"


def _leaves(tree: Any, is_leaf: Callable[[Any], bool], path: tuple) -> list:
    if is_leaf(tree):
        return [(path, tree)]
    if isinstance(tree, (tuple, list)):
        out = []
        for i, t in enumerate(tree):
            out += _leaves(t, is_leaf, path + (i,))
        return out
    if isinstance(tree, dict):
        out = []
        for k, t in tree.items():
            out += _leaves(t, is_leaf, path + (k,))
        return out
    return [(path, tree)]
