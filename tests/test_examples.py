"""The examples in ``examples/`` run end to end on a tiny budget."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip(
    "sb3_contrib", reason="sb3-contrib is not installed (pip install -e '.[examples]')"
)
from stable_baselines3.common.env_checker import check_env  # noqa: E402

from tests.conftest import load_script  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    """Import ``examples/<name>.py``."""
    return load_script(EXAMPLES / f"{name}.py")


@pytest.fixture(scope="module")
def sb3_example():
    return load_example("sb3_maskable_ppo")


def test_shared_policy_env_passes_sb3_checker_and_returns_completions(sb3_example):
    env = sb3_example.make_env(nodes=4, slots=3, load=1.0, horizon=15)
    check_env(env)
    rng = np.random.default_rng(0)
    all_completed = 0
    for seed in range(6):  # random actions: a few episodes so that some task completes
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            mask = env.action_masks()
            assert mask.dtype == bool and mask[-1]
            action = int(rng.choice(np.flatnonzero(mask)))
            _, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        completed = env.aec.unwrapped.engine.sim.metrics()["completed"]
        assert total == pytest.approx(completed)
        all_completed += completed
    assert all_completed > 0


def test_sb3_example_trains_and_reports_completion_rates(sb3_example, capsys):
    torch.set_num_threads(1)
    # seed 1: the evaluation seed holds tasks at this tiny horizon (rate is not nan).
    argv = "--timesteps 256 --nodes 4 --slots 3 --horizon 10 --eval-episodes 1 --seed 1"
    result = sb3_example.main(argv.split())
    assert result["timesteps"] >= 256
    assert 0.0 <= result["maskable_ppo"] <= 1.0 and not math.isnan(result["edf"])
    assert "mean completion rate  MaskablePPO" in capsys.readouterr().out
