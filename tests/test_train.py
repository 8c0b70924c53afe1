"""Training end to end on the smoke experiment: TensorBoard metrics, checkpoints, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from mara_agents.experiment import load_experiment
from tests.conftest import SMALL

ROOT = Path(__file__).parents[1]
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


def scalar_tags(trial_dir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for f in trial_dir.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(f))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


def test_smoke_trains_logs_and_exports(tmp_path: Path) -> None:
    import ray

    from mara_agents.export import export_checkpoint
    from mara_agents.policy import load_policy
    from mara_agents.train import train

    exp = load_experiment(smoke_yaml(tmp_path))
    try:
        grid = train(exp, out=tmp_path / "runs", verbose=0)
    finally:
        ray.shutdown()
    result = grid[0]
    assert result.error is None
    assert result.metrics["training_iteration"] == 1
    tags = scalar_tags(Path(result.path))
    assert "ray/tune/env_runners/mara/completion_rate" in tags
    assert "ray/tune/env_runners/mara/shaped_return" in tags
    assert any(t.startswith("ray/tune/learners/shared/") for t in tags)  # RLlib's own
    policy = load_policy(export_checkpoint(result.checkpoint.path, tmp_path / "p.pt"))
    assert policy.meta["env"]["num_nodes"] == exp.env.num_nodes
    # learning_curves.csv holds the simulator metrics that Tune's progress.csv lacks
    import pandas as pd

    from mara_agents.train import write_learning_curves_csv

    curves = pd.read_csv(write_learning_curves_csv(result.path, tmp_path / "curves.csv"))
    assert list(curves["training_iteration"]) == [1]
    mara = result.metrics["env_runners"]["mara"]
    assert curves["completion_rate"].iloc[0] == mara["completion_rate"]
    assert {"shaped_return", "reassignments", "num_env_steps_sampled_lifetime"} <= set(curves)


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
