"""MARA's PPO learner (mara_agents.training.learner): the warm-up section of an experiment,
the actor's schedule, and a real RLlib run in which only the critic learns at first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from mara_agents.training.experiment import parse_experiment
from mara_agents.training.learner import (
    MaraPPOLearner,
    actor_lr_schedule,
    critic_lr_of,
    warmup_of,
)
from mara_agents.training.ppo import build_config
from mara_agents.training.records import experiment_record
from mara_env.config import ConfigError
from tests.conftest import SMALL

MINIMAL = {"name": "w", "env": {"num_nodes": 4, "num_slots": 3}}


def test_actor_schedule_waits_for_the_critic_then_ramps_to_the_rate() -> None:
    assert actor_lr_schedule(1e-4, 1000, 500) == [[0, 0.0], [1000, 0.0], [1500, 1e-4]]
    assert actor_lr_schedule(1e-4, 0, 500) == [[0, 0.0], [500, 1e-4]]
    # no ramp: full rate one step after the critic's turn
    assert actor_lr_schedule(1e-4, 1000, 0) == [[0, 0.0], [1000, 0.0], [1001, 1e-4]]


def test_warmup_reaches_the_learner_and_only_then_the_record() -> None:
    plain = parse_experiment(MINIMAL)
    assert "warmup" not in experiment_record(plain)
    assert warmup_of(build_config(plain)) == (0, 0)
    exp = parse_experiment({**MINIMAL, "warmup": {"critic_steps": 300, "actor_ramp_steps": 50}})
    assert experiment_record(exp)["warmup"] == {"critic_steps": 300, "actor_ramp_steps": 50}
    config = build_config(exp)
    assert config.learner_class is MaraPPOLearner and warmup_of(config) == (300, 50)
    assert critic_lr_of(config) == config.lr and critic_lr_of(build_config(plain)) is None
    # the critic's own rate: an optimizer each, even without steps of warm-up
    fast = parse_experiment({**MINIMAL, "warmup": {"critic_lr": 1e-3}})
    assert experiment_record(fast)["warmup"] == {
        "critic_steps": 0,
        "actor_ramp_steps": 0,
        "critic_lr": 1e-3,
    }
    config = build_config(fast)
    assert config.learner_class is MaraPPOLearner and critic_lr_of(config) == 1e-3


@pytest.mark.parametrize(
    "warmup, match",
    [
        ({"critic_steps": -1}, "warmup.critic_steps"),
        ({"critic_steps": 1.5}, "warmup.critic_steps"),
        ({"actor_steps": 10}, "actor_steps"),
    ],
)
def test_a_bad_warmup_is_refused_by_name(warmup: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_experiment({**MINIMAL, "warmup": warmup})


def test_warmup_refuses_an_lr_schedule_of_its_own() -> None:
    exp = parse_experiment(
        {
            **MINIMAL,
            "warmup": {"critic_steps": 10},
            "rllib": {"training": {"lr": [[0, 1e-4], [100, 1e-5]]}},
        }
    )
    with pytest.raises(ConfigError, match="warmup with rllib.training.lr=.*expected one number"):
        build_config(exp)


def test_only_the_critic_learns_during_its_warmup(tmp_path: Path) -> None:
    """A real RLlib iteration inside ``critic_steps``: the critic's weights move, the
    actor's do not; the actor's and the critic's rates are logged apart."""
    import ray

    from mara_agents.training.experiment import load_experiment

    data = yaml.safe_load((Path(__file__).parents[3] / "experiments/mara_smoke.yaml").read_text())
    data["env"].update(traces=SMALL["traces"], split=SMALL["split"])
    data.update(view="round", warmup={"critic_steps": 10_000, "actor_ramp_steps": 1000})
    path = tmp_path / "warm.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        algo = build_config(load_experiment(path)).build_algo()
        before = algo.learner_group.get_weights()["default_policy"]
        result = algo.train()
        after = algo.learner_group.get_weights()["default_policy"]
        algo.stop()
    finally:
        ray.shutdown()
    moved = {k: not np.array_equal(before[k], after[k]) for k in before}
    critic = [k for k in moved if k.startswith("net.critic_")]
    actor = [k for k in moved if k not in critic]
    assert critic and actor
    assert any(moved[k] for k in critic), "the critic did not learn"
    assert not any(moved[k] for k in actor), [k for k in actor if moved[k]]
    stats = result["learners"]["default_policy"]
    assert stats["actor_learning_rate"] == 0.0 and stats["critic_learning_rate"] > 0
