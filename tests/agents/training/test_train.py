"""Training end to end on the smoke experiment: TensorBoard metrics, checkpoints, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mara_agents.training.experiment import load_experiment
from tests.conftest import SMALL

ROOT = Path(__file__).parents[3]
SMOKE = ROOT / "experiments" / "mara_smoke.yaml"


def smoke_yaml(tmp_path: Path, **stop: int) -> Path:
    """The smoke experiment on the test trace library, optionally with other stop criteria."""
    data = yaml.safe_load(SMOKE.read_text())
    data["env"].update(traces=SMALL["traces"], split=SMALL["split"])
    if stop:
        data["stop"] = stop
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def trained(path: Path, tmp_path: Path) -> Any:
    """Train the experiment at ``path`` into ``tmp_path/runs`` (Ray shut down after); the
    run's result, which ended without an error."""
    import ray

    from mara_agents.training.train import train

    exp = load_experiment(path)
    try:
        grid = train(exp, out=tmp_path / "runs", verbose=0)
    finally:
        ray.shutdown()
    result = grid[0]
    assert result.error is None
    return result


def train_one_round_batch(path: Path, tmp_path: Path) -> Any:
    """:func:`trained` on the round-view smoke YAML at ``path`` with a batch of 50 rounds
    in minibatches of 25."""
    data = yaml.safe_load(path.read_text())
    data["rllib"]["env_runners"]["rollout_fragment_length"] = 50
    data["rllib"]["training"].update(train_batch_size_per_learner=50, minibatch_size=25)
    path.write_text(yaml.safe_dump(data))
    return trained(path, tmp_path)


def scalars(trial_dir: Path, pattern: str = "events.out.tfevents.*") -> dict[str, list]:
    """Every scalar tag of the trial's event files matching ``pattern``, with its events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, list] = {}
    for f in trial_dir.glob(pattern):
        acc = EventAccumulator(str(f))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            found.setdefault(tag, []).extend(acc.Scalars(tag))
    return found


def test_smoke_trains_logs_and_exports(tmp_path: Path) -> None:

    from mara_agents.policy.inference import load_policy
    from mara_agents.training.curves import LEARNER_STATS
    from mara_agents.training.export import export_checkpoint
    from mara_agents.training.ppo import EPISODE_METRICS

    path = smoke_yaml(tmp_path)
    result = trained(path, tmp_path)
    exp = load_experiment(path)
    assert result.metrics["training_iteration"] == 1
    # Our one tag scheme, in our own event file, step = node decisions; Tune's stay.
    found = scalars(Path(result.path), "events.out.tfevents.*.mara")
    assert all(tag.startswith("mara/") for tag in found)
    assert {
        "mara/node_decisions",
        "mara/node_decisions_per_s",
        "mara/shaped_return",
        *(f"mara/{m}" for m in EPISODE_METRICS),
        *(f"mara/learner/{s}" for s in LEARNER_STATS),
    } <= set(found)
    (event,) = found["mara/learner/policy_loss"]
    assert event.step == result.metrics["mara"]["node_decisions"] == 200
    assert event.value == pytest.approx(result.metrics["learners"]["shared"]["policy_loss"])
    assert any(t.startswith("ray/tune/learners/") for t in scalars(Path(result.path)))
    policy = load_policy(export_checkpoint(result.checkpoint.path, tmp_path / "p.pt"))
    assert policy.meta["env"]["num_nodes"] == exp.env.num_nodes
    # learning_curves.csv holds the simulator metrics that Tune's progress.csv lacks
    import pandas as pd

    from mara_agents.training.curves import write_learning_curves_csv

    curves = pd.read_csv(write_learning_curves_csv(result.path, tmp_path / "curves.csv"))
    assert list(curves["training_iteration"]) == [1]
    mara = result.metrics["env_runners"]["mara"]
    assert curves["completion_rate"].iloc[0] == mara["completion_rate"]
    assert {"shaped_return", "reassignments", "num_env_steps_sampled_lifetime"} <= set(curves)


def test_round_view_smoke_trains_logs_and_exports(tmp_path: Path) -> None:
    """``view: round``: one RLlib step per decision round; node decisions are logged;
    ``train_loads`` trains on episodes that take turns over several loads."""
    import json

    import pandas as pd

    from mara_agents.policy.inference import load_policy
    from mara_agents.training.curves import write_learning_curves_csv
    from mara_agents.training.export import export_checkpoint

    path = smoke_yaml(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["view"] = "round"
    data["model"]["stay_bias"] = 3.0
    data["train_loads"] = [1.0, 2.0]
    path.write_text(yaml.safe_dump(data))
    result = train_one_round_batch(path, tmp_path)
    exp = load_experiment(path)
    trial = Path(result.path)
    assert "ComputeClusterRounds" in trial.name
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    # 50 rounds of 4 nodes each
    assert rows[-1]["mara"]["node_decisions"] == 50 * exp.env.num_nodes
    assert rows[-1]["mara"]["node_decisions_per_s"] > 0
    assert {
        "mara/node_decisions_per_s",
        "mara/completion_rate",
        "mara/learner/policy_loss",  # of the round view's single module
    } <= set(scalars(trial, "events.out.tfevents.*.mara"))
    curves = pd.read_csv(write_learning_curves_csv(trial, tmp_path / "curves.csv"))
    assert curves["node_decisions"].iloc[-1] == 50 * exp.env.num_nodes
    policy = load_policy(export_checkpoint(result.checkpoint.path, tmp_path / "p.pt"))
    assert policy.net.config.stay_bias == 3.0
    assert policy.meta["env"]["num_nodes"] == exp.env.num_nodes


def test_stalled_sampling_stops_the_run_with_an_error_naming_the_setting(tmp_path: Path) -> None:
    """When every sample call times out RLlib only warns and trains on nothing; we stop."""
    import ray

    from mara_agents.training.train import train

    path = smoke_yaml(tmp_path)
    data = yaml.safe_load(path.read_text())
    # one remote runner that cannot answer within a millisecond
    data["rllib"]["env_runners"].update(num_env_runners=1, sample_timeout_s=0.001)
    path.write_text(yaml.safe_dump(data))
    try:
        grid = train(load_experiment(path), out=tmp_path / "runs", verbose=0)
    finally:
        ray.shutdown()
    error = str(grid[0].error)
    assert "SamplingStalled" in error or "no samples" in error
    assert "sample_timeout_s=0.001" in error and "rllib.env_runners.sample_timeout_s" in error


def _iterations(trial_dir: Path) -> list[int]:
    import json

    lines = (trial_dir / "result.json").read_text().splitlines()
    return [json.loads(line)["training_iteration"] for line in lines if line.strip()]


def test_resume_continues_after_a_kill(tmp_path: Path) -> None:
    path = smoke_yaml(tmp_path, training_iteration=3)
    # Iterations long enough (seconds) that the run is still going after its first
    # checkpoint, so the kill really interrupts it.
    data = yaml.safe_load(path.read_text())
    data["rllib"]["env_runners"]["rollout_fragment_length"] = 1500
    data["rllib"]["training"].update(train_batch_size_per_learner=1500, minibatch_size=500)
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "mara_agents.cli", "train", str(path), "--out", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Own session, so killing it takes the local Ray instance down too (like a crash).
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 180
        # Wait for the first checkpoint and its reported result, then kill.
        while not (
            list(out.glob("mara_smoke/*/checkpoint_000000"))
            and any(p.stat().st_size for p in out.glob("mara_smoke/*/result.json"))
        ):
            assert proc.poll() is None, "training exited before its first checkpoint"
            assert time.time() < deadline, "no checkpoint within 180 s"
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    trial = next(out.glob("mara_smoke/PPO_*"))
    done_before = max(_iterations(trial), default=0)
    assert done_before < 3
    resumed = subprocess.run(
        [*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    its = _iterations(trial)
    assert its[-1] == 3
    # The counter continues from the checkpoint instead of starting again at 1.
    assert its.count(1) == 1 and its == sorted(its)
    # A changed YAML is refused, naming what changed, before anything runs.
    assert (out / "mara_smoke" / "experiment.yaml").is_file()
    data["stop"] = {"training_iteration": 5}
    path.write_text(yaml.safe_dump(data))
    changed = subprocess.run(
        [*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert changed.returncode == 2
    assert "stop.training_iteration: 3 -> 5" in changed.stderr
    assert len(changed.stderr.strip().splitlines()) == 1
    assert _iterations(trial) == its


def _bad_input(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture) -> str:
    """``mara train ARGS`` fails with one line on stderr, before Ray, writing nothing."""
    import ray

    from mara_agents.cli import main

    before = sorted(tmp_path.rglob("*"))
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert not ray.is_initialized()
    assert sorted(tmp_path.rglob("*")) == before  # nothing half-written
    return err


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"model": {"hidden": "sixteen"}}, ["model.hidden='sixteen'", "positive integer"]),
        ({"rllib": {"training": {"num_epochs": -3}}}, ["rllib.training.num_epochs=-3"]),
        ({"env": {"traces": "missing.parquet"}}, ["env.traces='missing.parquet'", "no such"]),
        ({"view": "rounds"}, ["view='rounds'", "one of ['node', 'round']"]),
        ({"name": ".."}, ["name='..'", "run name"]),
        ({"name": "/tmp/escape"}, ["name='/tmp/escape'"]),
        ({"name": "a/../../b"}, ["name='a/../../b'"]),
    ],
)
def test_bad_yaml_values_stop_at_the_door(
    tmp_path: Path, capsys: pytest.CaptureFixture, override: dict, words: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"base": str(SMOKE), **override}))
    err = _bad_input(tmp_path, [str(path), "--out", str(tmp_path / "runs")], capsys)
    assert "bad.yaml" in err
    for w in words:
        assert w in err


def test_bad_files_and_out_stop_at_the_door(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rand = tmp_path / "rand.yaml"
    rand.write_bytes(bytes(range(256)) * 8)
    err = _bad_input(tmp_path, [str(rand), "--out", str(tmp_path / "runs")], capsys)
    assert "rand.yaml: not a text file" in err
    file = tmp_path / "file"
    file.write_text("")
    err = _bad_input(tmp_path, [str(SMOKE), "--out", str(file)], capsys)
    assert f"out='{file}': is a file; expected a directory" in err
    err = _bad_input(tmp_path, [str(SMOKE), "--out", str(file / "sub")], capsys)
    assert f"{file} is a file; expected a directory" in err
    err = _bad_input(tmp_path, [str(SMOKE), "--out", "/proc/mara-no-such-dir/out"], capsys)
    assert "cannot write in /proc/mara-no-such-dir/out" in err  # as root, os.access says yes here
    err = _bad_input(tmp_path, [str(SMOKE), "--out", str(tmp_path / "r"), "--resume"], capsys)
    assert "nothing to resume" in err
    err = _bad_input(
        tmp_path, [str(SMOKE), "--out", str(tmp_path / "r"), "--pretrain-only"], capsys
    )
    assert "expected pretrain.episodes > 0, or pretrain.init_weights with" in err
