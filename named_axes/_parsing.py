"""Axis specs: reading ``in_axes`` / ``out_axes`` mappings, matching pytree prefixes, and
reading einsum specs.

Pure Python (no torch import).  A mapping names some positional axes of one array; its
forms (``{pos: name}``, ``['a', 'b', ...]``, ``['i', 'j']`` asserting the rank,
``[None, 'i']``, ``'a b ...'``, ``None``) and how a spec is told from a container of
specs (as JAX reads it) are in docs/guide.md §2.

>>> parse_mapping(['batch', 'seq', ...]).entries
((0, 'batch'), (1, 'seq'))
>>> m = parse_mapping([None, 'i']); (m.entries, m.rank)
(((1, 'i'),), 2)
>>> parse_mapping({-1: 'feat'}).resolve(3, what='argument 0')
((2, 'feat'),)

An einsum spec (:func:`parse_einsum_spec`, for ``nx.einsum``) has one letter per
positional axis and the named axes of a term in braces:

>>> parse_einsum_spec('n{b,k},{k,m}->n{b,m}')
(((('n',), ('b', 'k')), ((), ('k', 'm'))),
 (('n',), ('b', 'm')), True)
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from ._errors import AxisSpecError, AxisTypeError, fmt_spec
from ._plancache import PlanCache

__all__ = ["AxisMapping", "is_mapping", "parse_mapping", "check_name", "match_prefix", "path_str",
           "parse_einsum_spec"]


def check_name(name: Any, *, where: str) -> Hashable:
    """Reject names that are not hashable or that would be confused with positions."""
    if type(name) is str:   # the usual case; also spares dynamo a hash() it cannot trace
        return name
    if name is Ellipsis or name is None:
        raise AxisTypeError(f"{where}: {name!r} is not a valid axis name")
    if hasattr(name, "shape") and hasattr(name, "dtype"):   # (JAX: arrays are unhashable)
        raise AxisTypeError(f"{where}: axis name {fmt_spec(name)} is an array; names are "
                            f"strings or other hashable non-int values")
    if isinstance(name, tuple):   # (JAX: a container, no name)
        raise AxisTypeError(f"{where}: axis name {fmt_spec(name)} is a tuple, which "
                            f"collectives read as several axis names; use one name")
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


def check_identifier(name: Any, *, where: str) -> Hashable:
    """:func:`check_name`, and a string name must be an identifier, as PyTorch's named
    tensors require (xmap specs take any hashable name, as JAX's do)."""
    check_name(name, where=where)
    if type(name) is str and not name.isidentifier():
        raise AxisTypeError(f"{where}: axis name {name!r} is not a valid identifier (names "
                            f"are identifiers, as in PyTorch's named tensors)")
    return name


@dataclass(frozen=True)
class AxisMapping:
    """A parsed axis mapping: ``entries`` are ``(position, name)`` pairs as the user gave them."""

    entries: tuple
    spelling: str
    rank: int | None = None   # the rank a list without ``...`` asserts

    @property
    def names(self) -> tuple:
        return tuple(name for _, name in self.entries)

    def resolve(self, ndim: int, *, what: str, placed: int = 0) -> tuple:
        """Positions normalized against ``ndim``, sorted; ``placed``: how many of the
        ``ndim`` dims are named axes it places (an output's).

        Raises AxisSpecError: a position out of range or taken twice, or a rank the
        mapping asserts (a list without ``...``) that ``ndim`` is not.
        """
        if self.rank is not None and ndim != self.rank:
            raise AxisSpecError(
                f"{what}: axis mapping {self.spelling} names every axis (a list without ...), "
                f"which asserts rank {self.rank}, but the value has rank {ndim}; end the "
                f"list with ... to name only the leading axes")
        out = []
        seen: dict = {}
        for pos, name in self.entries:
            p = pos + ndim if pos < 0 else pos
            if not 0 <= p < ndim:
                raise AxisSpecError(
                    f"{what}: axis mapping {self.spelling} puts {name!r} at position {pos}, "
                    + (f"but the value has only {ndim} positional dimension(s)" if not placed else
                       f"but the result has only {ndim} dimension(s): the value's "
                       f"{ndim - placed} positional one(s) and the {placed} it places"))
            if p in seen:
                raise AxisSpecError(
                    f"{what}: axis mapping {self.spelling} maps position {pos} to both "
                    f"{seen[p]!r} and {name!r}"
                )
            seen[p] = name
            out.append((p, name))
        return tuple(sorted(out))


def is_mapping(spec: Any) -> bool:
    """Whether ``spec`` is one axis mapping, not a container of specs (JAX's
    ``maps._is_axes_leaf``, read as docs/guide.md §2 says)."""
    if spec is None or isinstance(spec, str):
        return True
    if isinstance(spec, (list, tuple)):
        if hasattr(spec, "_fields"):   # a namedtuple is a container
            return False
        # names and None (JAX: pytree leaves); an int is never a name: (3,) is a container
        # holding the bad spec 3
        return (len(spec) > 0 and spec[-1] is Ellipsis) or all(
            not isinstance(x, (list, tuple, dict, int)) for x in spec)
    if isinstance(spec, dict):
        # values all leaves (JAX's reading); with int keys a None or int value is a bad
        # name of a {pos: name} mapping rather than a container
        int_keys = all(isinstance(k, int) for k in spec)
        if not all(not isinstance(v, (list, tuple, dict)) and (int_keys or v is not None)
                   for v in spec.values()):
            return False
        bad = next((k for k in spec if isinstance(k, bool)), None)
        if bad is not None:
            raise AxisTypeError(f"axis mapping {spec!r}: {bad!r} is not a position (positions "
                                f"are ints)")
        return True
    return False


def _parse(kind: str, payload: tuple, spelling: str, rank: int | None = None) -> AxisMapping:
    where = f"axis mapping {spelling}"
    if kind == "dict":
        for pos, _ in payload:
            if not isinstance(pos, int):
                raise AxisTypeError(
                    f"{where}: key {pos!r} is not a position; a dict mapping is {{position: "
                    f"name}} with int positions (a dict of specs needs specs as values, e.g. "
                    f"{{{pos!r}: [{payload[0][1]!r}, ...]}})")
        entries = tuple((pos, check_name(name, where=where)) for pos, name in payload)
    else:   # None skips a position
        entries = tuple((i, check_name(name, where=where)) for i, name in enumerate(payload)
                        if name is not None)
    names = [n for _, n in entries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AxisSpecError(f"{where} names axis {sorted(map(repr, dup))[0]} more than once")
    return AxisMapping(entries, spelling, rank)


# keyed by spelling too, which error messages quote ([...] and None parse alike)
_PARSED = PlanCache("axis mappings", _parse)


def parse_mapping(spec: Any) -> AxisMapping:
    """Parse one axis mapping (its forms: docs/guide.md §2)."""
    if isinstance(spec, AxisMapping):
        return spec
    if spec is None:  # JAX users write None for an argument with nothing to name
        return _PARSED("list", (), "None", None)
    spelling = fmt_spec(spec)
    if isinstance(spec, str):
        words = spec.split()
        if words and words[-1] == "...":
            words = words[:-1]
        if "..." in words:
            raise AxisSpecError(f"axis mapping {spelling}: '...' may only come last")
        return _PARSED("list", tuple(words), spelling, None)
    if isinstance(spec, dict) and is_mapping(spec):
        return _PARSED("dict", tuple(sorted(spec.items(), key=_dict_order)), spelling, None)
    if isinstance(spec, (list, tuple)) and is_mapping(spec):
        full = not spec or spec[-1] is not Ellipsis   # no ...: names every axis
        body = tuple(spec) if full else tuple(spec[:-1])
        if any(n is Ellipsis for n in body):
            raise AxisSpecError(f"axis mapping {spelling}: ... may only come last")
        return _PARSED("list", body, spelling, len(body) if full else None)
    raise AxisSpecError(f"{spelling} is not an axis mapping (a dict {{pos: name}}, "
                        f"a list of names, optionally ending with ..., or a string 'a b ...')")


def _dict_order(item: tuple) -> tuple:
    # positions are ints; a bad key is reported by _parse, not by sorted()
    k = item[0]
    return (0, k, "") if isinstance(k, int) else (1, 0, repr(k))


def path_str(path: tuple, base: str = "argument") -> str:
    """Spell a pytree path: ``(1, 'w') -> "argument 1['w']"``; with ``base='output'``:
    ``(1, 'w') -> "output 1['w']"``, ``('q', 0) -> "output['q'][0]"``, ``() -> "the output"``.
    """
    if not path:
        return "the value" if base == "argument" else f"the {base}"
    head, rest = path[0], path[1:]
    s = f"{base} {head}" if isinstance(head, int) else (
        f"[{head!r}]" if base == "argument" else f"{base}[{head!r}]")
    return s + "".join(f"[{p!r}]" for p in rest)


def match_prefix(spec: Any, tree: Any, is_leaf: Callable[[Any], bool], *, what: str,
                 path: tuple = (), base: str = "argument") -> list:
    """Pair every leaf of ``tree`` with the axis mapping that covers it.

    ``spec`` is a pytree prefix of ``tree`` (tuples, lists, dicts; a namedtuple is no
    tuple, as in JAX) whose leaves are axis mappings, each covering its subtree.  Returns
    ``[(path, leaf, AxisMapping), ...]`` in flattening order; ``base`` names the tree's top
    in errors (``'argument'`` or ``'output'``).
    """
    where = path_str(path, base)
    if is_mapping(spec):
        mapping = parse_mapping(spec)
        return [(p, leaf, mapping) for p, leaf in _leaves(tree, is_leaf, path)]
    if isinstance(spec, (tuple, list)):
        if is_leaf(tree) or not isinstance(tree, (tuple, list)):
            raise AxisSpecError(
                f"{what}: the spec at {where} is a {type(spec).__name__} of "
                f"{len(spec)} specs, but the value there is {_kind(tree)}")
        if type(spec) is not type(tree):
            raise AxisSpecError(
                f"{what}: the spec at {where} is a {type(spec).__name__}, but the value there "
                f"is {_kind(tree)}; a spec's containers are the value's (a pytree prefix)")
        if len(spec) != len(tree):
            raise AxisSpecError(
                f"{what}: the spec has {len(spec)} entries but the call has {len(tree)} "
                f"arguments; give one axis mapping per argument, or a single mapping for all"
                if not path and base == "argument" else
                f"{what}: the spec at {where} has {len(spec)} entries but the value "
                f"there has {len(tree)}; give one axis mapping per element, or a single "
                f"mapping for all of them")
        keys = range(len(tree))
    elif isinstance(spec, dict):
        if not isinstance(tree, dict):
            raise AxisSpecError(
                f"{what}: the spec at {where} is a dict with keys "
                f"{sorted(map(repr, spec))}, but the value there is {_kind(tree)}")
        if set(spec) != set(tree):
            raise AxisSpecError(
                f"{what}: the spec at {where} has keys {sorted(map(repr, spec))} "
                f"but the value has keys {sorted(map(repr, tree))}")
        keys = tree
    else:
        raise AxisTypeError(   # a TypeError, as JAX's for in_axes=3.5
            f"{what}: {fmt_spec(spec)} at {where} is neither an axis mapping nor a container "
            f"of them")
    return [m for k in keys for m in match_prefix(spec[k], tree[k], is_leaf, what=what,
                                                  path=path + (k,), base=base)]


def _kind(tree: Any) -> str:
    if isinstance(tree, (tuple, list, dict)):
        return f"a {type(tree).__name__} of {len(tree)}"
    return f"a single {type(tree).__name__}"


def _leaves(tree: Any, is_leaf: Callable[[Any], bool], path: tuple) -> list:
    if is_leaf(tree) or not isinstance(tree, (tuple, list, dict)):
        return [(path, tree)]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    return [leaf for k, t in items for leaf in _leaves(t, is_leaf, path + (k,))]


# -- einsum specs ---------------------------------------------------------------------

def _parse_einsum_spec(spec: str) -> tuple:
    """Split ``spec`` into ``(inputs, output, braced)``: each term ``(positional letters,
    named tuple | None)``, ``output`` None without ``->``, ``braced``: any braces."""
    s = spec.replace(" ", "")
    if s.count("->") > 1:
        raise AxisSpecError(f"einsum {spec!r}: more than one '->'")
    lhs, arrow, rhs = s.partition("->")
    inputs = tuple(_parse_einsum_term(t, spec, f"operand {i}")
                   for i, t in enumerate(_split_einsum_terms(lhs)))
    output = _parse_einsum_term(rhs, spec, "the output") if arrow else None
    if output is not None:
        seen = set()
        for c in output[0]:
            if c != "..." and c in seen:
                raise AxisSpecError(f"einsum {spec!r}: the output term {rhs!r} repeats letter "
                                    f"{c!r}; an output axis appears once")
            seen.add(c)
    return inputs, output, "{" in s


parse_einsum_spec = PlanCache("einsum specs", _parse_einsum_spec, maxsize=512)


def _split_einsum_terms(lhs: str) -> list:
    """Split at the commas that separate operands (not those inside braces)."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(lhs):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(lhs[start:i])
            start = i + 1
    terms.append(lhs[start:])
    return terms


def _parse_einsum_term(term: str, spec: str, role: str = "") -> tuple:
    """``(positional letters, named axes in braces or None)`` of one term."""
    letters, names, rest = [], None, term
    while rest:
        if rest[0] == "{":
            end = rest.find("}")
            if end < 0:
                raise AxisSpecError(f"einsum {spec!r}: unclosed '{{' in term {term!r}")
            if names is not None:
                raise AxisSpecError(f"einsum {spec!r}: term {term!r} has two brace groups; "
                                    f"list all its named axes in one")
            names = tuple(n for n in rest[1:end].split(",") if n)
            if len(set(names)) != len(names):
                twice = next(n for n in names if names.count(n) > 1)
                raise AxisSpecError(f"einsum {spec!r}: term {term!r} repeats a named axis: "
                                    f"{twice!r} ({role}); a named axis appears once per term")
            rest = rest[end + 1:]
        elif rest.startswith("..."):
            letters.append("...")
            rest = rest[3:]
        elif rest[0] in string.ascii_letters:
            letters.append(rest[0])
            rest = rest[1:]
        else:
            raise AxisSpecError(f"einsum {spec!r}: unexpected character {rest[0]!r} in term "
                                f"{term!r} (letters for positional axes, names in braces)")
    return tuple(letters), names
