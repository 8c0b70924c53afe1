"""The one JSON reader for files a user may write or edit (deadline priors, history files,
job logs in JSON).

It is the standard library's ``json.loads``, except that an object that gives a key twice
is refused, naming the key, where ``json`` would keep the last value without a word.
"""

from __future__ import annotations

import json
from typing import Any


class DuplicateKeyError(ValueError):
    """An object gives one key twice; the message names it."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(f"key {key!r} is given twice in one object; give each key once")
        seen[key] = value
    return seen


def loads(text: str) -> Any:
    """The JSON value of ``text``; :class:`DuplicateKeyError` (a ``ValueError``) if an
    object gives a key twice, ``json.JSONDecodeError`` if it is not JSON."""
    return json.loads(text, object_pairs_hook=_unique)
