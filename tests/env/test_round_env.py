"""The round view (one step = all N nodes) against the node-by-node AEC env it shares an
engine with: same episode for the same actions, and the node views the decoder rebuilds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara_agents.policy.features import wrap
from mara_env.cluster_env import InvalidActionError, env
from mara_env.round_env import RoundEnv


def _aec(config: dict, wrapper: str):
    return wrap(env(**config), wrapper)


def _tensors(obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v)[None] for k, v in obs.items()}


@pytest.mark.parametrize("wrapper", ["none", "wls"])
def test_same_seed_and_actions_give_the_same_episode_and_node_views(
    small_config: dict, wrapper: str
) -> None:
    from mara_agents.policy.rounds import flat_views, round_features
    from mara_agents.training.rl_module import round_layout

    aec = _aec(small_config, wrapper)
    rounds = RoundEnv(_aec(small_config, wrapper))
    layout = round_layout(rounds.observation_space)
    n = rounds.engine.config.num_nodes
    rng = np.random.default_rng(3)
    aec.reset(seed=11)
    robs, _ = rounds.reset(seed=11)
    assert rounds.observation_space.contains(robs)
    total_aec = total_round = 0.0
    steps = 0
    while True:
        views, actions = [], []
        for _ in range(n):
            o, _, term, trunc, _ = aec.last()
            views.append(o)
            # mostly valid actions; now and then a masked-out one (counts as idle in both)
            valid = np.flatnonzero(o["action_mask"])
            a = (
                int(rng.choice(valid))
                if rng.random() < 0.9
                else int(rng.integers(len(o["action_mask"])))
            )
            actions.append(a if o["action_mask"][a] else len(o["action_mask"]) - 1)
            aec.step(a)
        total_aec += aec.rewards["node_0"]
        # The decoder's rebuilt views equal what the AEC env showed each node.
        robs_t = _tensors(robs)
        per_node, mask = round_features(robs_t, torch.tensor([actions]), layout.num_slots)
        flat = flat_views(robs_t, per_node, layout)
        for i, o in enumerate(views):
            np.testing.assert_array_equal(flat[0, i].numpy(), o["observation"])
            np.testing.assert_array_equal(mask[0, i].numpy(), o["action_mask"])
            np.testing.assert_array_equal(
                np.concatenate([flat[0, i].numpy(), robs["queue"]]), o["state"]
            )
        robs, reward, term, trunc, info = rounds.step(np.array(actions))
        total_round += reward
        assert reward == aec.rewards["node_0"]
        steps += 1
        if term or trunc:
            break
    assert aec.terminations["node_0"] and term and not trunc
    assert info["episode"] == aec.infos["node_0"]["episode"]
    assert total_round == pytest.approx(total_aec)
    assert total_round == pytest.approx(info["episode"]["completed"])  # gamma = 1 telescopes
    assert steps == rounds.engine.rounds


def test_masked_actions_count_as_idle_and_bad_actions_name_the_node(small_config: dict) -> None:
    rounds = RoundEnv(**small_config)
    obs, _ = rounds.reset(seed=0)
    n, k = len(obs["node_slot"]), len(obs["slot_cap"])
    empty = np.flatnonzero(obs["action_mask"][:-1] == 0)
    if len(empty):
        a = np.full(n, k)
        a[0] = empty[0]
        _, _, _, _, info = rounds.step(a)
        assert info["masked_actions"] == 1
    with pytest.raises(InvalidActionError, match="node_2: action 99"):
        rounds.step(np.array([0, 0, 99] + [k] * (n - 3)))
    with pytest.raises(InvalidActionError, match=r"shape \(3,\); expected \(5,\)"):
        rounds.step(np.zeros(3, np.int64))
    # nothing was applied by the refused actions
    assert rounds.engine.assign.tolist() == [-1] * n


def test_mara_env_round_view_imports_no_torch_or_ray() -> None:
    import subprocess
    import sys

    code = (
        "import sys, mara_env.round_env; "
        "bad = [m for m in ('torch', 'ray') if m in sys.modules]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
