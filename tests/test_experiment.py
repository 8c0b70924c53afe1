"""Experiment YAMLs: the shipped ones load, mistakes give errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mara_agents.experiment import load_experiment, parse_experiment
from mara_env.config import ConfigError

EXPERIMENTS = sorted((Path(__file__).parents[1] / "experiments").glob("mara*.yaml"))
MINIMAL = {"name": "t", "env": {"num_nodes": 4, "num_slots": 3}}


def test_shipped_experiments_load() -> None:
    names = {p.stem for p in EXPERIMENTS}
    assert {"mara", "mara_no_flow", "mara_no_shaping", "mara_independent", "mara_smoke"} <= names
    for path in EXPERIMENTS:
        exp = load_experiment(path)
        assert exp.name == path.stem
        assert exp.rllib.get("training", {}).get("gamma", 1.0) == 1.0
    assert load_experiment(EXPERIMENTS[0]).env.split == "train"


def test_ablations_differ_from_the_method_in_one_thing() -> None:
    exp = {p.stem: load_experiment(p) for p in EXPERIMENTS}
    assert exp["mara"].wrapper == "flow" and exp["mara_no_flow"].wrapper == "wls"
    assert exp["mara_no_shaping"].env.shaping == 0.0 and exp["mara"].env.shaping > 0
    assert exp["mara_independent"].model["independent"] and not exp["mara"].model["independent"]
    # The teacher sees what the policy sees: flow_share with the ablation's predictor.
    assert exp["mara"].pretrain.scheduler == "flow_share"
    assert exp["mara_no_flow"].pretrain.scheduler == "flow_share:predictor=wls"
    for name in ("mara_no_shaping", "mara_independent"):
        assert exp[name].pretrain == exp["mara"].pretrain


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"epochs": 3}, ["unknown key", "'epochs'", "allowed keys", "rllib"]),
        ({"env": {"num_nodez": 4}}, ["num_nodez", "num_nodes"]),
        ({"rllib": {"training": {"lr": 1e-4, "learning_rate": 1}}}, ["learning_rate", "lr"]),
        ({"rllib": {"trainin": {}}}, ["'trainin'", "env_runners", "training"]),
        ({"rllib": {"training": {"gamma": 0.99}}}, ["gamma", "1.0"]),
        ({"model": {"hiden": 8}}, ["hiden", "hidden"]),
        ({"stop": {"iterations": 3}}, ["iterations", "training_iteration"]),
        ({"wrapper": "flo"}, ["flo", "flow", "wls"]),
        ({"pretrain": {"episode": 3}}, ["episode", "episodes"]),
        (
            {"pretrain": {"scheduler": "unifrom", "episodes": 2}},
            ["pretrain.scheduler", "unifrom", "uniform"],
        ),
        (
            {"pretrain": {"scheduler": "flow_share:predictor=gp", "episodes": 2}},
            ["predictor", "'flow'"],
        ),
    ],
)
def test_errors_name_the_bad_key_and_the_allowed_ones(change: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment({**MINIMAL, **change})
    for w in words:
        assert w in str(err.value)


def test_missing_required_key_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing required key 'env'"):
        parse_experiment({"name": "t"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_experiment(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_experiment(bad)


def test_rllib_overrides_reach_the_ppo_config(tmp_path: Path) -> None:
    from mara_agents.train import build_config

    path = tmp_path / "e.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **MINIMAL,
                "rllib": {
                    "training": {"lr": 0.00123, "num_epochs": 2},
                    "env_runners": {"num_envs_per_env_runner": 3},
                },
            }
        )
    )
    config = build_config(load_experiment(path), num_env_runners=0)
    assert config.lr == 0.00123 and config.num_epochs == 2
    assert config.num_envs_per_env_runner == 3 and config.num_env_runners == 0
    assert config.gamma == 1.0 and config.lambda_ == 0.95


def test_init_weights_is_one_warm_start_and_must_exist(tmp_path: Path) -> None:
    from mara_agents.train import train

    both = {"pretrain": {"init_weights": "w.pt", "episodes": 2, "scheduler": "uniform"}}
    with pytest.raises(ConfigError, match="init_weights and episodes > 0 both set"):
        parse_experiment({**MINIMAL, **both})
    exp = parse_experiment({**MINIMAL, "pretrain": {"init_weights": str(tmp_path / "no.pt")}})
    with pytest.raises(FileNotFoundError, match="no.pt.*no such file"):
        train(exp, out=tmp_path)  # before Ray starts
    finetune = Path(__file__).parents[1] / "experiments" / "mara_finetune.yaml"
    assert load_experiment(finetune).pretrain.init_weights
