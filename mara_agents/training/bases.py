"""Experiment files on a base chain: reading them, ``!replace``, merging each into its base.

A file with ``base: other.yaml`` (a path relative to the file) is merged key by key into
that file, whose own ``base`` is followed in turn; a mapping tagged ``!replace`` replaces
the base's mapping whole.  Every file is checked on its own before the merge, so an error
names the file that holds the bad key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mara_env.config import ConfigError
from mara_env.yaml_file import UniqueKeyLoader, load_yaml


class Replace(dict):
    """A mapping tagged ``!replace``: it replaces the base's mapping instead of merging."""


class _Loader(UniqueKeyLoader):
    """The user-file loader (a key given twice is refused) that also knows ``!replace``."""


_Loader.add_constructor(
    "!replace", lambda loader, node: Replace(loader.construct_mapping(node, deep=True))
)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` merged into ``base``: mappings key by key, other values replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and not isinstance(value, Replace):
            if isinstance(out.get(key), dict):
                value = merge(out[key], value)
        out[key] = dict(value) if isinstance(value, dict) else value
    return out


def _read_document(path: Path) -> Any:
    """The YAML document in the file at ``path`` (``!replace`` mappings as :class:`Replace`)."""
    if not path.is_file():
        raise ConfigError(f"experiment file {str(path)!r} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not a text file (byte {e.start} is not UTF-8); expected an experiment YAML"
        ) from None
    try:
        return load_yaml(text, _Loader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def read_with_bases(
    path: str | Path, check: Callable[[Any, str], None], chain: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """The document at ``path`` with its ``base`` chain merged in, ``check(doc, file)`` on each."""
    path = Path(path)
    if path.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, path))
        raise ConfigError(f"{path}: base cycle {cycle}; expected a chain of bases that ends")
    data = _read_document(path)
    check(data, str(path))
    if "base" not in data:
        return data
    base = path.parent / data["base"]
    if not base.is_file():
        raise ConfigError(f"{path}: base={data['base']!r}: no such file {str(base)!r}")
    own = {k: v for k, v in data.items() if k != "base"}
    return merge(read_with_bases(base, check, (*chain, path.resolve())), own)
