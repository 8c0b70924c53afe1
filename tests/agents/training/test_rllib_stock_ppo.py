"""examples/rllib_stock_ppo.py, run as a user runs it: RLlib's stock PPO trains on both envs,
evaluates and writes its outputs; the command line names bad settings."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.rllib", reason="ray[rllib] is not installed (pip install -e '.[rllib]')")
import pandas as pd  # noqa: E402

from tests.conftest import run_script  # noqa: E402

SCRIPT = "examples/rllib_stock_ppo.py"
# A tiny cluster and batch, sampled in this process; the budget is spent after the first
# iteration.  Base seed 2: the three evaluation episodes each hold a task at this horizon.
TINY = (
    "--minutes 0.01 --nodes 4 --slots 3 --horizon 10 --episodes 3 --eval-seed 2 "
    "--num-env-runners 0 --train-batch-size 64 --minibatch-size 32 --num-epochs 1"
)
POLICIES = (
    "ppo",
    "ppo_sampled",
    "ppo_untrained",
    "random_actions",
    "random_policy",
    "edf",
    "random",
    "uniform",
)


@pytest.mark.parametrize("env", ["plain", "stay"])
def test_stock_ppo_trains_evaluates_and_writes_outputs(tmp_path, env):
    out = tmp_path / env
    proc = run_script(SCRIPT, *f"--env {env} {TINY} --out {out}".split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    for name in POLICIES:
        assert 0.0 <= result[name] <= 1.0, name
        assert result[f"{name}_moves_per_tick"] >= 0.0, name
    assert result["ppo_idled_per_tick"] == 0.0  # the module never picks a masked action
    if env == "plain":
        assert result["ppo_bumped_per_tick"] == 0.0  # only the opt-in bumps
    for name in ("random", "edf", "uniform"):
        assert -1.0 <= result[f"ppo_minus_{name}"] <= 1.0
    curve = pd.read_csv(out / "curve.csv")
    columns = ["iteration", "wall_s", "env_steps", "episodes", "train_completion"]
    assert list(curve.columns) == columns
    assert list(curve["iteration"]) == list(range(1, len(curve) + 1))
    assert (curve["env_steps"] == 64 * curve["iteration"]).all()
    assert curve["train_completion"].dropna().between(0, 1).all()
    if env == "stay":  # an iteration of 64 ticks holds whole episodes of ~10 ticks
        assert curve["episodes"].sum() >= 1
    assert result["train_seconds"] >= 0.6 and result["iterations"] == len(curve)
    assert result["config"]["env"] == env and len(result["seeds"]) == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        ("--minutes 0", "minutes=0.0: expected a positive training budget"),
        ("--minutes -1", "minutes=-1.0: expected a positive training budget"),
        ("--env aec", "invalid choice: 'aec'"),
        ("--episodes 1", "episodes=1: expected at least 2"),
        ("--num-env-runners -1", "num_env_runners=-1: expected 0 or more"),
        ("--train-batch-size 0", "train_batch_size=0: expected a positive integer"),
        ("--nodes 0", "config num_nodes=0: expected a positive integer"),
    ],
)
def test_the_command_line_names_bad_settings(argv, message):
    proc = run_script(SCRIPT, *argv.split())
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
