"""Files a user writes are read by one YAML loader: a key given twice is refused, naming
the key and its two lines, in every kind of file and at every depth."""

from __future__ import annotations

import pytest

from mara_agents.live.jobfile import JobFileError, load_job_file
from mara_agents.training.experiment import load_experiment
from mara_env.config import ConfigError, load_cluster_file
from mara_env.yaml_file import load_yaml

JOB = "{name: a, trainer: tabular, target: 0.1, deadline: 5}"
READERS = {
    "cluster": lambda path: load_cluster_file(path),
    "live job": lambda path: load_job_file(path, tick_seconds=10.0, num_nodes=4),
    "experiment": lambda path: load_experiment(path),
}
CASES = [
    ("cluster", "reassign_cost: 0.5\nthroughput_noise: 0.1\nreassign_cost: 0.2\n", 3),
    ("live job", f"jobs:\n  - {JOB}\njobs:\n  - {JOB}\n", 3),
    (
        "live job",
        "jobs:\n  - name: a\n    trainer: tabular\n    target: 0.1\n    deadline: 5\n"
        "    deadline: 50\n",
        6,
    ),
    ("live job", "jobs: [{name: a, trainer: tabular, target: 0.1, target: 0.2}]\n", 1),
    ("experiment", "name: x\nenv:\n  num_nodes: 4\n  load: 1.0\n  num_nodes: 8\n", 5),
    ("experiment", "name: x\nname: y\n", 2),
]


@pytest.mark.parametrize(("kind", "text", "line"), CASES)
def test_a_key_given_twice_is_refused_naming_the_key_and_line(tmp_path, kind, text, line):
    path = tmp_path / "file.yaml"
    path.write_text(text)
    with pytest.raises((ConfigError, JobFileError)) as err:
        READERS[kind](path)
    message = str(err.value)
    assert "given twice" in message and f"line {line})" in message, message
    assert "\n" not in message


def test_keys_merged_in_from_an_anchor_may_still_be_overridden():
    assert load_yaml("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  x: 3\n")["b"] == {"x": 3, "y": 2}
