"""The one reader of cluster files (mara_env.config.load_cluster_file): every key a
ClusterConfig field, of its type, checked together; errors are one line naming the key."""

from __future__ import annotations

import dataclasses

import pytest

from mara_env.config import ClusterConfig, ConfigError, load_cluster_file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha_range: 0.8", "alpha_range: expected a pair (low, high) of numbers, got 0.8"),
        ("alpha_range: [0.8]", "alpha_range: expected a pair (low, high)"),
        ("num_slots: 2.5", "num_slots: expected an integer, got 2.5"),
        ("strict: 1", "strict: expected true or false, got 1"),
        ("families: [1, 2]", "families: expected a list of texts or null"),
        ("colour: red", "unknown key(s) ['colour']"),
        ("reassign_cost: .nan", "reassign_cost=nan"),
        ("[1, 2]", "expected a mapping"),
        ("a: [", "not valid YAML"),
    ],
)
def test_a_bad_cluster_file_is_one_line_naming_the_key(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_cluster_file(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_every_field_is_a_key_a_cluster_file_may_set(tmp_path):
    defaults = ClusterConfig()
    for field in dataclasses.fields(ClusterConfig):
        value = getattr(defaults, field.name)
        if value is None:
            continue
        path = tmp_path / f"{field.name}.yaml"
        shown = list(value) if isinstance(value, tuple) else value
        path.write_text(f"{field.name}: {shown!r}\n".replace("'", '"').replace("True", "true"))
        assert load_cluster_file(path)[field.name] == value


def test_keys_a_command_sets_itself_are_refused_naming_its_option(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("num_nodes: 4\n")
    with pytest.raises(ConfigError, match="'num_nodes' is set by --nodes"):
        load_cluster_file(path, {"num_nodes": "--nodes"})
