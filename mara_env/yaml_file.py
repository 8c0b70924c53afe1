"""The one YAML reader for files a user writes (cluster, live job, experiment files).

It is PyYAML's safe loader, except that a mapping that gives a key twice is refused,
naming the key and both lines, where PyYAML would keep the last value without a word.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping gives one key twice; the message names it and both lines."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (keys merged in
    with ``<<`` may still be overridden, as YAML's merge key means)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML's own error says so
                    break
                if first is not None:
                    raise DuplicateKeyError(
                        f"key {key!r} is given twice (line {first} and line {line}); give "
                        "each key once"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str | bytes, loader: type[UniqueKeyLoader] = UniqueKeyLoader) -> Any:
    """The document in ``text``, read by ``loader`` (:class:`UniqueKeyLoader` or a
    subclass that knows more tags); :class:`yaml.YAMLError` if it is not valid YAML or
    gives a key twice."""
    return yaml.load(text, Loader=loader)  # noqa: S506 -- a SafeLoader subclass
