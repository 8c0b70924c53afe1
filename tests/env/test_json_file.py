"""The one JSON reader of user files: a key given twice, at any depth, is refused by name,
where the standard library keeps the last value."""

from __future__ import annotations

import pytest

from mara_env import json_file


def test_plain_json_reads_as_the_standard_library_reads_it() -> None:
    assert json_file.loads('{"a": [1, {"b": 2.5}], "c": null}') == {"a": [1, {"b": 2.5}], "c": None}


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '[{"x": {"b": 1, "b": 1}}]'])
def test_a_key_given_twice_is_refused_by_name(text) -> None:
    with pytest.raises(json_file.DuplicateKeyError, match="is given twice") as err:
        json_file.loads(text)
    assert isinstance(err.value, ValueError) and (
        "'a'" in str(err.value) or "'b'" in str(err.value)
    )
