"""The one reader of cluster files (mara_env.config.load_cluster_file): every key a
ClusterConfig field, of its type, checked together; errors are one line naming the key."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

import mara_env
from mara_env.config import ClusterConfig, ConfigError, load_cluster_file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha_range: 0.8", "alpha_range=0.8: expected a pair (low, high) of numbers"),
        ("alpha_range: [0.8]", "alpha_range=[0.8]: expected a pair (low, high)"),
        ("num_slots: 2.5", "num_slots=2.5: expected an integer"),
        ("strict: 1", "strict=1: expected true or false"),
        ("families: [1, 2]", "families=[1, 2]: expected a list of texts or null"),
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


def _from_file(tmp_path, values):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(values))
    return load_cluster_file(path)


# every way into a ClusterConfig: the Python API third-party RL libraries use, and the CLI's
PATHS = {
    "ClusterConfig": lambda tmp_path, values: ClusterConfig(**values),
    "from_dict": lambda tmp_path, values: ClusterConfig.from_dict(values),
    "mara_env.env(config=...)": lambda tmp_path, values: mara_env.env(config=values),
    "mara_env.parallel_env(**...)": lambda tmp_path, values: mara_env.parallel_env(**values),
    "cluster file": _from_file,
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"strict": "no"}, "strict='no': expected true or false"),
        ({"load": True}, "load=True: expected a number"),
        ({"max_cycles": True}, "max_cycles=True: expected an integer or null"),
        ({"num_nodes": 4.0}, "num_nodes=4.0: expected an integer"),
        ({"shaping": math.inf}, "shaping=inf: expected a finite number"),
        ({"deadline_sigma": math.nan}, "deadline_sigma=nan: expected a number in [0, 3]"),
        ({"families": "vision"}, "families='vision': expected a list of texts or null"),
        ({"slack_range": "ab"}, "slack_range='ab': expected a pair (low, high) of numbers"),
        (
            {"size_range": [4.0, math.inf]},
            "size_range=[4.0, inf]: expected a pair (low, high) with",
        ),
        ({"estimate_menu": [1, "2"]}, "estimate_menu=[1, '2']: expected a list of numbers"),
    ],
)
def test_every_path_into_a_cluster_config_checks_types_with_one_message(
    tmp_path, path, values, message
):
    with pytest.raises(ConfigError) as err:
        PATHS[path](tmp_path, values)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
