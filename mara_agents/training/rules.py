"""What a YAML value must be: rules that check a value and say what was expected.

A :class:`Rule` is a predicate with its description; ``&`` narrows one rule by another
and ``|`` accepts either.  :func:`rules_of` derives the rules of a dataclass's or a
callable's keywords from their type hints; :func:`check_keys` checks a mapping against
rules and raises a one-line :class:`ConfigError` naming the key path, the value and
what was expected (or the unknown keys and the allowed ones).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from mara_env.config import ConfigError


@dataclass(frozen=True)
class Rule:
    """What a YAML value must be: ``ok(value)``, described as ``expected``."""

    ok: Callable[[Any], bool]
    expected: str

    def __and__(self, other: Rule) -> Rule:
        return Rule(lambda v: self.ok(v) and other.ok(v), other.expected)

    def __or__(self, other: Rule) -> Rule:
        return Rule(lambda v: self.ok(v) or other.ok(v), f"{self.expected} or {other.expected}")


def is_int(v: Any) -> bool:
    """An integer, not a bool (YAML's ``true`` is not 1)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def one_of(choices: Collection[Any]) -> Rule:
    """One of ``choices``."""
    return Rule(lambda v: v in choices, f"one of {list(choices)}")


ANY = Rule(lambda v: True, "anything")
NULL = Rule(lambda v: v is None, "null")
BOOL = Rule(lambda v: isinstance(v, bool), "true or false")
STRING = Rule(lambda v: isinstance(v, str), "a string")
INTEGER = Rule(is_int, "an integer")
NUMBER = Rule(is_number, "a number")
MAPPING = Rule(lambda v: isinstance(v, dict), "a mapping")
POSITIVE_INT = Rule(lambda v: is_int(v) and v > 0, "a positive integer")
COUNT = Rule(lambda v: is_int(v) and v >= 0, "an integer >= 0")
POSITIVE = Rule(lambda v: is_number(v) and v > 0, "a positive number")
NON_NEGATIVE = Rule(lambda v: is_number(v) and v >= 0, "a number >= 0")
FRACTION = Rule(lambda v: is_number(v) and 0 <= v <= 1, "a number in [0, 1]")


def rule_of(hint: Any) -> Rule:
    """The rule of a type hint: ``int``, ``float``, ``bool``, ``str``, unions, tuples."""
    simple = {bool: BOOL, int: INTEGER, float: NUMBER, str: STRING, type(None): NULL}
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rules = [rule_of(a) for a in args]
        return Rule(lambda v: any(r.ok(v) for r in rules), " or ".join(r.expected for r in rules))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = rule_of(args[0])
        return Rule(
            lambda v: isinstance(v, (list, tuple)) and all(item.ok(x) for x in v),
            f"a list of {item.expected.removeprefix('a ').removeprefix('an ')}s",
        )
    if origin is tuple:
        items = [rule_of(a) for a in args]
        return Rule(
            lambda v: (
                isinstance(v, (list, tuple))
                and len(v) == len(items)
                and all(r.ok(x) for r, x in zip(items, v))
            ),
            f"a list of {len(items)} ({', '.join(r.expected for r in items)})",
        )
    if origin is dict or hint is dict:
        return MAPPING
    if isinstance(hint, type):
        return Rule(lambda v: isinstance(v, hint), f"a {hint.__name__}")
    return ANY


def rules_of(cls: Any, bounds: dict[str, Rule], skip: tuple[str, ...] = ()) -> dict[str, Rule]:
    """Each keyword of a dataclass or callable: its type hint's rule, narrowed by ``bounds``."""
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
    else:
        hints = typing.get_type_hints(cls.__init__ if inspect.isclass(cls) else cls)
    names = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip
    ]
    return {
        n: rule_of(hints.get(n, Any)) & bounds[n] if n in bounds else rule_of(hints.get(n, Any))
        for n in names
    }


def check_keys(values: dict[str, Any], rules: dict[str, Rule], where: str, path: str) -> None:
    """Unknown keys and values that break their rule, named by their key path."""
    unknown = sorted(set(values) - set(rules), key=str)
    if unknown:
        at = f"{path}: " if path else ""
        raise ConfigError(f"{where}: {at}unknown key(s) {unknown}; allowed keys: {list(rules)}")
    for key, value in values.items():
        if not rules[key].ok(value):
            at = f"{path}.{key}" if path else key
            raise ConfigError(f"{where}: {at}={value!r}: expected {rules[key].expected}")
