"""Group-relative advantages (mara_agents.training.group): seeds, baselines, the learner connector,
and a real RLlib iteration on the smoke experiment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from mara_agents.training.group import (
    SEED_KEY,
    GroupRelativeAdvantages,
    group_baselines,
    group_seeds,
    return_spread,
    returns_to_go,
)
from tests.conftest import SMALL


def test_group_seeds_are_shared_within_a_group_and_fresh_per_call() -> None:
    seeds = group_seeds(0, 1, 1, num_envs=8, size=4)
    assert seeds[:4] == [seeds[0]] * 4 and seeds[4:] == [seeds[4]] * 4
    assert seeds[0] != seeds[4]
    assert group_seeds(0, 1, 1, 8, 4) == seeds  # reproducible
    assert group_seeds(0, 1, 2, 8, 4)[0] != seeds[0]  # the next call
    assert group_seeds(0, 2, 1, 8, 4)[0] != seeds[0]  # another runner
    with pytest.raises(ValueError, match="8 envs do not split into groups of 3"):
        group_seeds(0, 1, 1, 8, 3)


def test_baseline_is_the_leave_one_out_mean_of_the_group_mates() -> None:
    g = [returns_to_go(np.array(r, float)) for r in ([1, 0, 2], [0, 0, 0], [3, 1], [5.0], [1.0])]
    np.testing.assert_array_equal(g[0], [3, 2, 2])
    b = group_baselines(g, ["a", "a", "a", "b", None])
    # episode 2 ended after two steps: it counts 0 at the third
    np.testing.assert_allclose(b[0], [(0 + 4) / 2, (0 + 1) / 2, 0])
    np.testing.assert_allclose(b[1], [(3 + 4) / 2, (2 + 1) / 2, 2 / 2])
    np.testing.assert_allclose(b[2], [(3 + 0) / 2, (2 + 0) / 2])
    assert b[3] is None and b[4] is None  # alone in its group; no group
    spread = return_spread([np.array([x]) for x in (1, 3, 10, 14, 7)], ["a", "a", "b", "b", None])
    assert spread["return_std"] == pytest.approx(np.std([1, 3, 10, 14, 7]))
    assert spread["return_std_in_group"] == pytest.approx(np.sqrt((1 + 1 + 4 + 4) / 2))


class _Critic(ValueFunctionAPI):
    """A module whose value is 10 at every step: the fallback baseline."""

    def compute_values(self, batch, embeddings=None):
        return torch.full((len(batch[Columns.REWARDS]),), 10.0)

    def is_stateful(self) -> bool:
        return False


class _Modules(dict):
    """Stands in for the learner's MultiRLModule: its modules by id, and its framework."""

    framework = "torch"


def _episode(rewards: list[float], seed: int | None) -> SingleAgentEpisode:
    n = len(rewards)
    infos = [{} if seed is None else {SEED_KEY: seed}] + [{}] * n
    return SingleAgentEpisode(
        observations=[np.zeros(1)] * (n + 1),
        actions=[0] * n,
        rewards=rewards,
        infos=infos,
        len_lookback_buffer=0,
    )


def test_connector_puts_group_relative_advantages_and_returns_in_the_batch() -> None:
    episodes = [_episode([1, 0, 2], 7), _episode([0, 0, 0], 7), _episode([4, 0], None)]
    rewards = np.concatenate([e.get_rewards() for e in episodes]).astype(np.float32)
    batch = {"m": {Columns.REWARDS: rewards}}
    connector = GroupRelativeAdvantages()
    out = connector(rl_module=_Modules(m=_Critic()), episodes=episodes, batch=batch)
    raw = np.array([3 - 0, 2 - 0, 2 - 0, 0 - 3, 0 - 2, 0 - 2, 4 - 10, 0 - 10], float)
    want = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(out["m"][Postprocessing.ADVANTAGES].numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(
        out["m"][Postprocessing.VALUE_TARGETS].numpy(), [3, 2, 2, 0, 0, 0, 4, 0]
    )
    assert connector.fallback_fraction == pytest.approx(2 / 8)


def test_group_gae_compares_gae_advantages_with_the_group_mates() -> None:
    """``compare="gae"``: each step's GAE advantage minus its mates' mean at that step;
    with gamma = lambda = 1 and a constant critic of 10 that is ``G_t - G_t(mates)`` (the
    critic cancels), and plain GAE for an episode without mates."""
    episodes = [_episode([1, 0, 2], 7), _episode([0, 0, 0], 7), _episode([4, 0], None)]
    columns = {Columns.REWARDS: np.concatenate([e.get_rewards() for e in episodes])}
    ends = np.zeros(8, np.float32)
    ends[[2, 5, 7]] = 1.0
    columns.update({Columns.TERMINATEDS: ends, Columns.TRUNCATEDS: np.zeros(8, np.float32)})
    connector = GroupRelativeAdvantages(compare="gae", gamma=1.0, lambda_=1.0)
    out = connector(rl_module=_Modules(m=_Critic()), episodes=episodes, batch={"m": columns})
    raw = np.array([3, 2, 2, -3, -2, -2, 4 - 10, 0 - 10], float)
    want = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(out["m"][Postprocessing.ADVANTAGES].numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(
        out["m"][Postprocessing.VALUE_TARGETS].numpy(), [3, 2, 2, 0, 0, 0, 4, 0]
    )
    with pytest.raises(ValueError, match="compare='td': expected one of"):
        GroupRelativeAdvantages(compare="td")


def test_envs_reset_with_one_seed_run_one_workload() -> None:
    from mara_agents.training.rllib_env import round_env_creator

    config = {"cluster": dict(SMALL), "wrapper": "none", "loads": [1.0, 2.0]}
    a, b = round_env_creator(config), round_env_creator(config)
    (obs_a, info_a), (obs_b, info_b) = a.reset(seed=11), b.reset(seed=11)
    assert info_a == info_b == {SEED_KEY: 11}
    assert all(np.array_equal(obs_a[k], obs_b[k]) for k in obs_a)
    assert a.current.engine.config.load == b.current.engine.config.load == 2.0  # 11 % 2
    wa, wb = a.current.engine.sim.workload, b.current.engine.sim.workload
    np.testing.assert_array_equal(wa.arrival, wb.arrival)
    np.testing.assert_array_equal(wa.deadline, wb.deadline)
    assert a.reset(seed=12)[1] == {SEED_KEY: 12} and a.reset()[1] == {}


@pytest.mark.parametrize("estimator", ["group", "group_gae"])
def test_group_training_runs_whole_episodes_in_groups(tmp_path: Path, estimator: str) -> None:
    """A real RLlib iteration: every sampled episode is complete, and the learner's
    episodes come in groups of ``group_size`` that share a seed (so a workload)."""
    import ray

    import mara_agents.training.group as group
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.ppo import build_config

    data = yaml.safe_load((Path(__file__).parents[3] / "experiments/mara_smoke.yaml").read_text())
    data["env"].update(traces=SMALL["traces"], split=SMALL["split"])
    data.update(view="round", advantage={"estimator": estimator, "group_size": 2})
    data["rllib"]["env_runners"]["num_envs_per_env_runner"] = 4
    path = tmp_path / "group.yaml"
    path.write_text(yaml.safe_dump(data))
    seen: list[list[tuple]] = []
    call = group.GroupRelativeAdvantages.__call__

    def spy(self, *, episodes, batch, **kwargs):
        sa = list(self.single_agent_episode_iterator(episodes, False))
        seen.append([(e.t_started, e.get_infos(0).get(SEED_KEY)) for e in sa])
        # the batch's rows are the episodes' steps in the same order (one extra step each)
        rewards = np.concatenate([[*e.get_rewards()[:-1], 0.0] for e in sa])
        np.testing.assert_allclose(batch["default_policy"][Columns.REWARDS], rewards, atol=1e-5)
        return call(self, episodes=episodes, batch=batch, **kwargs)

    group.GroupRelativeAdvantages.__call__ = spy
    try:
        algo = build_config(load_experiment(path)).build_algo()
        result = algo.train()
        algo.stop()
    finally:
        group.GroupRelativeAdvantages.__call__ = call
        ray.shutdown()
    assert result["env_runners"]["num_env_steps_sampled"] >= 200
    assert seen and all(start == 0 for batch in seen for start, _ in batch)
    keys = [k for batch in seen for _, k in batch if k is not None]
    counts = {k: keys.count(k) for k in keys}
    assert keys and all(c % 2 == 0 for c in counts.values()), counts
    stats = result["learners"]["default_policy"]
    assert 0 <= stats["group_fallback"] < 1 and stats["return_std_in_group"] >= 0
