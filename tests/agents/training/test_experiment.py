"""Experiment YAMLs: the shipped ones load, mistakes give errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mara_agents.training.experiment import Experiment, load_experiment, parse_experiment
from mara_env.config import ConfigError

EXPERIMENTS = sorted((Path(__file__).parents[3] / "experiments").glob("mara*.yaml"))
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
    scratch = exp["mara_scratch"]
    assert scratch.wrapper == "flow" and exp["mara_no_flow"].wrapper == "wls"
    assert exp["mara_no_shaping"].env.shaping == 0.0 and scratch.env.shaping > 0
    assert exp["mara_independent"].model["independent"] and not scratch.model["independent"]
    # PPO from scratch, round view, on the same budget
    for name in ("mara_no_shaping", "mara_independent", "mara_no_flow"):
        assert exp[name].pretrain == scratch.pretrain and scratch.pretrain.episodes == 0
        assert exp[name].view == "round" and exp[name].stop == {"time_total_s": 480}
    # the method: behaviour cloning of flow_share, then PPO round by round
    assert exp["mara"].pretrain.scheduler == "flow_share" and exp["mara"].pretrain.episodes > 0
    assert exp["mara"].view == "round" and exp["mara_node"].view == "node"


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
            ["predictor", "flow, wls, exact"],
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
    from mara_agents.training.ppo import build_config

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
    assert config.sample_timeout_s == 600.0  # RLlib's 60 s stalls big batches on 2 cores


@pytest.mark.parametrize(
    ("rllib", "words"),
    [
        (
            {"training": {"train_batch_size_per_learner": 200, "minibatch_size": 100000}},
            ["rllib.training.minibatch_size=100000", "train_batch_size_per_learner=200"],
        ),
        ({"training": {"minibatch_size": 100000}}, ["minibatch_size=100000", "=8000"]),
        (
            {"env_runners": {"rollout_fragment_length": 5000, "num_env_runners": 0}},
            ["e.yaml: rllib:", "rollout_fragment_length=5000"],
        ),
    ],
)
def test_rllib_settings_are_checked_together_before_ray_starts(
    tmp_path: Path, rllib: dict, words: list[str]
) -> None:
    import ray

    from mara_agents.training.ppo import build_config

    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({**MINIMAL, "rllib": rllib}))
    exp = load_experiment(path)  # each value alone is fine
    with pytest.raises(ConfigError) as err:
        build_config(exp)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(path))
    for w in words:
        assert w in str(err.value)
    assert not ray.is_initialized()


def test_an_iteration_without_samples_stops_training_with_a_clear_error() -> None:
    """RLlib only warns when every sample call timed out, then trains on nothing for good."""
    from types import SimpleNamespace

    from mara_agents.training.ppo import MaraMetrics, SamplingStalled, build_config

    config = build_config(parse_experiment({**MINIMAL, "view": "round"}), num_env_runners=0)
    algorithm = SimpleNamespace(config=config)
    metrics = MaraMetrics()
    metrics.on_algorithm_init(algorithm=algorithm)
    fine = {"training_iteration": 1, "env_runners": {"num_env_steps_sampled": 64.0}}
    metrics.on_train_result(algorithm=algorithm, result=fine)
    assert fine["mara"]["node_decisions_per_s"] > 0
    for runners in ({}, {"num_env_steps_sampled": float("nan")}, {"num_env_steps_sampled": 0}):
        stalled = {"training_iteration": 7, "env_runners": runners}
        with pytest.raises(SamplingStalled, match=r"iteration 7.*sample_timeout_s=600.0"):
            metrics.on_train_result(algorithm=algorithm, result=stalled)


def test_init_weights_is_one_warm_start_and_must_exist(tmp_path: Path) -> None:
    import ray

    from mara_agents.training.train import train

    both = {"pretrain": {"init_weights": "w.pt", "episodes": 2, "scheduler": "uniform"}}
    with pytest.raises(ConfigError, match="init_weights and episodes > 0 both set"):
        parse_experiment({**MINIMAL, **both})
    exp = parse_experiment({**MINIMAL, "pretrain": {"init_weights": str(tmp_path / "no.pt")}})
    with pytest.raises(ConfigError, match="no.pt.*no such file"):
        train(exp, out=tmp_path / "runs")
    assert not ray.is_initialized() and not (tmp_path / "runs").exists()
    finetune = Path(__file__).parents[3] / "experiments" / "mara_finetune.yaml"
    assert load_experiment(finetune).pretrain.init_weights


@pytest.mark.parametrize(
    ("name", "before"),
    [
        ("mara_hedge_jobs", "mara_hedge_group"),
        ("mara_plan_gap", "mara_hedge_jobs"),
        ("mara_jobs", "mara_hedge_group"),
    ],
)
def test_a_stage_starts_from_the_export_of_the_stage_before(
    name: str,
    before: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A stage's pretrain.init_weights is the file the stage before exports in its
    header's 'How to run', which this stage's header lists first; the stage loads without
    it, and running it without it is one line naming the file and the stage to run first,
    before anything is written."""
    from mara_agents.cli import main

    here = Path(__file__).parents[3] / "experiments"
    monkeypatch.chdir(tmp_path)  # no runs/ here
    path = here / f"{name}.yaml"
    exp = load_experiment(path)
    init = exp.pretrain.init_weights
    export = f"--out {init}"
    assert export in (here / f"{before}.yaml").read_text()
    header = path.read_text()
    assert header.index(export) < header.index(f"mara train experiments/{name}.yaml")
    mode = ["--pretrain-only"] if exp.pretrain.clones else []
    assert main(["train", str(path), "--out", str(tmp_path / "runs"), *mode]) == 2
    err = capsys.readouterr().err.strip()
    assert f"init_weights={init!r}: no such file" in err and "\n" not in err
    assert f"run the stage that writes it first: {here / before}.yaml" in err
    assert not any(tmp_path.iterdir())


# ---- base files ------------------------------------------------------------------------------
def load(name: str) -> Experiment:
    return load_experiment(Path(__file__).parents[3] / "experiments" / f"{name}.yaml")


def test_ablation_files_hold_only_their_difference_from_their_base() -> None:
    """Each derived file is its base with exactly the changes it lists."""
    import dataclasses

    from mara_agents.training.experiment import AdvantageConfig, CheckpointConfig, PretrainConfig

    mara, scratch = load("mara"), load("mara_scratch")

    def changed(base: object, **kw: object) -> object:
        return dataclasses.replace(base, **kw, path=None)

    def same(name: str) -> object:
        return dataclasses.replace(load(name), path=None)

    assert same("mara_scratch") == changed(
        mara,
        name="mara_scratch",
        train_loads=(),
        model={**mara.model, "stay_bias": 4.0},
        pretrain=dataclasses.replace(mara.pretrain, episodes=0),
        rllib={
            **mara.rllib,
            "training": {
                **mara.rllib["training"],
                "lr": 3e-4,
                "entropy_coeff": 0.001,
                "clip_param": 0.2,
            },
        },
    )
    budget = {"time_total_s": 480}
    assert same("mara_no_shaping") == changed(
        scratch, name="mara_no_shaping", env=scratch.env.replace(shaping=0.0), stop=budget
    )
    assert same("mara_independent") == changed(
        scratch,
        name="mara_independent",
        model={**scratch.model, "independent": True},
        stop=budget,
    )
    assert same("mara_no_flow") == changed(
        scratch, name="mara_no_flow", wrapper="wls", wrapper_options={}, stop=budget
    )
    assert same("mara_finetune") == changed(
        mara, name="mara_finetune", pretrain=PretrainConfig(init_weights="runs/mara_pretrain.pt")
    )
    finetune = load("mara_finetune")
    assert same("mara_group") == changed(
        finetune,
        name="mara_group",
        advantage=AdvantageConfig(estimator="group_gae", group_size=8),
        stop={"time_total_s": 2400},
        checkpoint=CheckpointConfig(frequency=10, keep=20),
        rllib={
            "env_runners": {**finetune.rllib["env_runners"], "num_envs_per_env_runner": 16},
            "training": {
                **finetune.rllib["training"],
                "lr": 5e-5,
                "train_batch_size_per_learner": 4096,
                "num_epochs": 2,
            },
        },
    )
    for name, base in [
        ("mara_group", "mara_finetune"),
        ("mara_no_shaping", "mara_scratch"),
        ("mara_independent", "mara_scratch"),
        ("mara_no_flow", "mara_scratch"),
        ("mara_finetune", "mara"),
        ("mara_scratch", "mara"),
        ("mara_node", "mara"),
    ]:
        text = (Path(__file__).parents[3] / "experiments" / f"{name}.yaml").read_text()
        assert f"base: {base}.yaml" in text and len(text.splitlines()) < 30


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_base_chains_merge_and_replace(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", yaml.safe_dump({**MINIMAL, "model": {"hidden": 16, "heads": 2}}))
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "b.yaml", "base: ../a.yaml\nname: b\nmodel: {heads: 4}\n")
    c = write(
        tmp_path / "sub" / "c.yaml",
        "base: b.yaml\nname: c\nenv: {load: 1.5}\nwrapper_options: null\n",
    )
    exp = load_experiment(c)
    assert exp.name == "c"
    assert exp.env.num_nodes == 4 and exp.env.num_slots == 3 and exp.env.load == 1.5
    assert exp.model["hidden"] == 16 and exp.model["heads"] == 4  # merged, not replaced
    d = write(tmp_path / "sub" / "d.yaml", "base: c.yaml\nname: d\nmodel: !replace {heads: 1}\n")
    assert load_experiment(d).model["hidden"] == 64  # the default, not a's 16


def test_base_errors_name_the_file_and_key(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "base: b.yaml\nname: a\n")
    write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match="base cycle a.yaml -> b.yaml -> a.yaml"):
        load_experiment(tmp_path / "a.yaml")
    write(tmp_path / "self.yaml", "base: self.yaml\n")
    with pytest.raises(ConfigError, match="base cycle"):
        load_experiment(tmp_path / "self.yaml")
    write(tmp_path / "orphan.yaml", "base: gone.yaml\nname: o\n")
    with pytest.raises(ConfigError, match="orphan.yaml: base='gone.yaml': no such file"):
        load_experiment(tmp_path / "orphan.yaml")
    # a bad key is reported in the file that holds it, with its key path
    write(tmp_path / "base.yaml", yaml.safe_dump({**MINIMAL, "model": {"hiden": 8}}))
    write(tmp_path / "child.yaml", "base: base.yaml\nname: child\n")
    with pytest.raises(ConfigError, match=r"base.yaml: model: unknown key\(s\) \['hiden'\]"):
        load_experiment(tmp_path / "child.yaml")
    write(tmp_path / "base.yaml", yaml.safe_dump(MINIMAL))
    write(tmp_path / "child.yaml", "base: base.yaml\nrllib: {training: {lr: fast}}\n")
    with pytest.raises(ConfigError, match="child.yaml: rllib.training.lr='fast': expected"):
        load_experiment(tmp_path / "child.yaml")
    with pytest.raises(ConfigError, match="unknown key.*'base'"):
        parse_experiment({**MINIMAL, "base": "x.yaml"})  # only files have bases


# ---- every value checked at the door -------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model": {"hidden": "sixteen"}}, ["model.hidden='sixteen'", "positive integer"]),
        ({"model": {"hidden": 30, "heads": 4}}, ["model.heads=4", "divisor", "hidden=30"]),
        ({"model": {"value_scale": 0}}, ["model.value_scale=0", "positive number"]),
        ({"model": {"independent": "yes"}}, ["model.independent='yes'", "true or false"]),
        ({"model": {"plan_gap": True}}, ["model.plan_gap", "predictor wrapper", "'none'"]),
        (
            {"wrapper": "flow", "model": {"plan_gap": True, "independent": True}},
            ["model.plan_gap", "independent: false"],
        ),
        ({"pretrain": {"dagger_labels": "mine"}}, ["dagger_labels='mine'", "consistent"]),
        ({"rllib": {"training": {"num_epochs": -3}}}, ["rllib.training.num_epochs=-3"]),
        ({"rllib": {"training": {"lambda_": 1.5}}}, ["lambda_=1.5", "[0, 1]"]),
        ({"rllib": {"training": {"use_gae": "no"}}}, ["use_gae='no'", "true or false"]),
        ({"rllib": {"env_runners": {"num_env_runners": -1}}}, ["num_env_runners=-1", ">= 0"]),
        ({"rllib": {"env_runners": {"rollout_fragment_length": "x"}}}, ["'auto'"]),
        ({"env": {"num_nodes": 4, "reassign_cost": "no"}}, ["env.reassign_cost='no'"]),
        ({"env": {"num_nodes": 4, "families": "tabular"}}, ["env.families='tabular'", "list"]),
        ({"env": {"num_nodes": 4, "load": "1.0"}}, ["env.load='1.0'", "a number"]),
        ({"env": {"num_nodes": -4}}, ["env", "num_nodes=-4", "positive integer"]),
        ({"env": {"traces": 3}}, ["env.traces=3", "a string or null"]),
        ({"pretrain": {"episodes": -3}}, ["pretrain.episodes=-3", "integer >= 0"]),
        ({"pretrain": {"lr": "1e-3"}}, ["pretrain.lr='1e-3'", "positive number"]),
        ({"checkpoint": {"keep": 0}}, ["checkpoint.keep=0", "positive integer"]),
        ({"stop": {"training_iteration": -1}}, ["stop.training_iteration=-1", "positive"]),
        ({"stop": {}}, ["stop={}", "non-empty mapping"]),
        ({"seed": 1.5}, ["seed=1.5", "integer >= 0"]),
        ({"seed": -1}, ["seed=-1"]),
        ({"wrapper": "wls", "wrapper_options": {"n_samples": 32}}, ["n_samples", "ridge"]),
        ({"wrapper": "flow", "wrapper_options": {"n_samples": "32"}}, ["n_samples='32'"]),
        ({"wrapper_options": {"n_samples": 32}}, ["wrapper_options (none)", "n_samples"]),
        (
            {"wrapper": "flow+deadline", "wrapper_options": {"teacher": "lara"}},
            ["teacher='lara'", "a hedge teacher spec"],
        ),
        (
            {"wrapper": "flow", "wrapper_options": {"teacher": "hedge"}},
            ["wrapper_options (flow)", "teacher"],
        ),
        ({"name": ".."}, ["name='..'", "run name"]),
        ({"name": "/abs"}, ["name='/abs'"]),
        ({"name": "a/b"}, ["name='a/b'"]),
        ({"name": "a\\b"}, ["run name"]),
        ({"name": ""}, ["name=''"]),
        ({"name": 7}, ["name=7"]),
        ({"view": "round", "train_loads": []}, ["train_loads=[]", "non-empty list"]),
        ({"view": "round", "train_loads": [1.0, 0]}, ["train_loads=[1.0, 0]", "(0, 100]"]),
        ({"view": "round", "train_loads": 1.5}, ["train_loads=1.5"]),
        ({"train_loads": [1.0, 2.0]}, ["train_loads=[1.0, 2.0]", "view 'round'"]),
        ({"view": "round", "train_jobs": []}, ["train_jobs=[]", "non-empty list"]),
        ({"view": "round", "train_jobs": [None, 3]}, ["train_jobs=[None, 3]", "workloads"]),
        ({"view": "round", "train_jobs": ["alibaba"]}, ["train_jobs", "'alibaba'", "parquet"]),
        ({"view": "round", "train_jobs": ["no.parquet"]}, ["train_jobs", "no.parquet", "existing"]),
        ({"train_jobs": [None, "philly"]}, ["train_jobs=[None, 'philly']", "view 'round'"]),
        ({"advantage": {"estimator": "rloo"}}, ["advantage.estimator='rloo'", "'group_gae'"]),
        ({"advantage": {"group_size": 1}}, ["advantage.group_size=1", "integer >= 2"]),
        ({"advantage": {"size": 4}}, ["advantage", "unknown key", "group_size"]),
        ({"advantage": {"estimator": "group"}}, ["estimator='group'", "view 'round'"]),
        # keys that are not names, alone or among names (YAML reads 1, 2.5, null, true)
        ({1: 2}, ["unknown key(s) [1]", "allowed keys"]),
        ({2.5: 1, None: 3}, ["unknown key(s) [2.5, None]"]),
        ({"env": {"num_nodes": 4, 7: 1}}, ["env: unknown key(s) [7]", "num_nodes"]),
        ({"model": {True: 1}}, ["model: unknown key(s) [True]"]),
        ({"stop": {1: 2}}, ["stop: unknown key(s) [1]"]),
        ({"rllib": {1: {"a": 1}}}, ["rllib: unknown method 1"]),
        ({"rllib": {"training": {1: 2, "lr": 0.1}}}, ["rllib.training: unknown key(s) [1]"]),
        ({"wrapper": "wls", "wrapper_options": {3: 1}}, ["wrapper_options (wls)", "[3]"]),
    ],
)
def test_every_value_is_checked(change: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment({**MINIMAL, **change}, where="exp.yaml")
    msg = str(err.value)
    assert msg.startswith("exp.yaml: ") and "\n" not in msg
    for w in words:
        assert w in msg


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    rand = tmp_path / "rand.yaml"
    rand.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ConfigError, match="rand.yaml: not a text file"):
        load_experiment(rand)
    listed = write(tmp_path / "list.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="list.yaml: expected a mapping"):
        load_experiment(listed)


def test_out_and_input_files_are_checked(tmp_path: Path) -> None:
    from mara_agents.training.records import check_inputs, check_out

    file = write(tmp_path / "f", "")
    for out in (file, file / "sub"):
        with pytest.raises(ConfigError, match="is a file; expected a directory"):
            check_out(out)
    assert check_out(tmp_path / "new" / "runs") == tmp_path / "new" / "runs"
    assert not (tmp_path / "new").exists()
    exp = parse_experiment({**MINIMAL, "env": {**MINIMAL["env"], "traces": "/no/t.parquet"}})
    with pytest.raises(ConfigError, match=r"env.traces='/no/t.parquet'.*no such trace file"):
        check_inputs(exp)
    heavy = {**MINIMAL, "view": "round", "train_jobs": [None, "philly"], "train_loads": [1, 99]}
    with pytest.raises(ConfigError, match=r"train_jobs: 'philly' at load 99: .*no train day"):
        check_inputs(parse_experiment(heavy))
    # env.jobs alone is checked at every training load, not only at env.load
    replayed = {**MINIMAL, "env": {**MINIMAL["env"], "jobs": "philly"}}
    check_inputs(parse_experiment({**replayed, "view": "round", "train_loads": [1, 1.5]}))
    with pytest.raises(ConfigError, match=r"env.jobs: 'philly' at load 99: .*no train day"):
        check_inputs(parse_experiment({**replayed, "view": "round", "train_loads": [1, 99]}))


def test_resume_refuses_a_changed_experiment(tmp_path: Path) -> None:
    import dataclasses

    from mara_agents.training.records import check_unchanged, write_record

    exp = parse_experiment({**MINIMAL, "stop": {"training_iteration": 3}})
    record = tmp_path / "run" / "experiment.yaml"
    write_record(exp, record)
    check_unchanged(exp, record)  # same experiment: fine
    longer = dataclasses.replace(exp, stop={"training_iteration": 5}, seed=2)
    with pytest.raises(ConfigError) as err:
        check_unchanged(longer, record)
    msg = str(err.value)
    assert "stop.training_iteration: 3 -> 5" in msg and "seed: 0 -> 2" in msg
    assert "\n" not in msg
    # a record of some sections ignores the others (the warm start ignores stop)
    write_record(exp, record, sections=("seed", "env"))
    check_unchanged(dataclasses.replace(exp, stop={"training_iteration": 5}), record)
    with pytest.raises(ConfigError, match="env.load: 1.0 -> 1.5"):
        check_unchanged(dataclasses.replace(exp, env=exp.env.replace(load=1.5)), record)


def test_train_loads_reach_the_env_config_and_only_then_the_record() -> None:
    from mara_agents.training.records import experiment_record

    plain = parse_experiment({**MINIMAL, "view": "round"})
    assert "loads" not in plain.env_config() and "train_loads" not in experiment_record(plain)
    mixed = parse_experiment({**MINIMAL, "view": "round", "train_loads": [1, 1.5]})
    assert mixed.env_config()["loads"] == [1.0, 1.5]
    assert experiment_record(mixed)["train_loads"] == [1.0, 1.5]
    assert "jobs" not in plain.env_config() and "train_jobs" not in experiment_record(plain)
    both = parse_experiment({**MINIMAL, "view": "round", "train_jobs": [None, "philly"]})
    assert both.env_config()["jobs"] == [None, "philly"]
    record = experiment_record(both)
    assert record["train_jobs"] == [None, "philly"] and "jobs_hours" in record["env"]


def test_privileged_critic_reaches_the_env_config_and_only_then_the_record() -> None:
    """critic.privileged reaches the round env (env_config) and the run's record; the
    cluster's history, built for the run, is no part of the record (its inputs are)."""
    from dataclasses import replace

    from mara_agents.planning.history import ClusterHistory
    from mara_agents.training.records import experiment_record

    plain = parse_experiment({**MINIMAL, "view": "round"})
    assert "privileged" not in plain.env_config() and "critic" not in experiment_record(plain)
    critic = parse_experiment(
        {**MINIMAL, "view": "round", "critic": {"privileged": ["remaining_work"]}}
    )
    assert critic.env_config()["privileged"] == ["remaining_work"]
    assert experiment_record(critic)["critic"] == {"privileged": ["remaining_work"]}
    with_history = replace(plain, history=ClusterHistory.of(plain.env))
    assert experiment_record(with_history) == experiment_record(plain)


def test_group_advantage_reaches_the_config_and_only_then_the_record() -> None:
    from mara_agents.training.group import GroupedEnvRunner, group_size
    from mara_agents.training.learner import MaraPPOLearner
    from mara_agents.training.ppo import build_config
    from mara_agents.training.records import experiment_record

    plain = parse_experiment({**MINIMAL, "view": "round"})
    assert "advantage" not in experiment_record(plain)
    config = build_config(plain)
    assert config.batch_mode == "truncate_episodes" and group_size(config) == 0
    grouped = {**MINIMAL, "view": "round", "advantage": {"estimator": "group_gae", "group_size": 4}}
    grouped["rllib"] = {"env_runners": {"num_envs_per_env_runner": 8}}
    exp = parse_experiment(grouped)
    assert experiment_record(exp)["advantage"] == {"estimator": "group_gae", "group_size": 4}
    config = build_config(exp)
    assert config.batch_mode == "complete_episodes" and group_size(config) == 4
    assert config.learner_config_dict == {"advantage": "group_gae", "group_size": 4}
    assert config.env_runner_cls is GroupedEnvRunner
    assert config.learner_class is MaraPPOLearner
    grouped["rllib"]["env_runners"]["num_envs_per_env_runner"] = 6
    with pytest.raises(ConfigError, match="group_size=4 does not divide.*per_env_runner=6"):
        build_config(parse_experiment(grouped))


def test_a_run_handed_the_clusters_history_records_the_same_experiment() -> None:
    """``mara train`` hands the run the cluster's history (arrays of its deadline prior):
    the record holds the experiment, not the history, and reads as before."""
    import dataclasses

    from mara_agents.planning.history import ClusterHistory
    from mara_agents.training.records import experiment_record

    exp = parse_experiment({**MINIMAL, "view": "round"})
    handed = dataclasses.replace(exp, history=ClusterHistory.of(exp.env))
    assert experiment_record(handed) == experiment_record(exp)
