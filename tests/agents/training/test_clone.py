"""Behaviour cloning: its episode seeds (every stage and experiment seed its own) and what
it records (the AEC env's view of every node)."""

from __future__ import annotations

from mara_agents.training.clone import demonstration_seeds


def test_cloning_stages_never_share_an_episode_seed():
    """The teacher's episodes and each DAgger round draw from their own SeedSequence
    stream; the old offsets (10_000 + seed, 20_000 + seed + 1_000 r) collided once a round
    had more than 1,000 episodes, and across experiment seeds."""
    seeds = [
        s for root in (0, 1) for stage in range(6) for s in demonstration_seeds(root, stage, 3000)
    ]
    assert len(set(seeds)) == len(seeds)
    assert all(isinstance(s, int) and s >= 0 for s in seeds)  # numpy and the env take them


def test_demonstrations_are_what_the_aec_env_shows_each_node() -> None:
    """Played by the episode loop round by round, the recorded steps are the AEC env's:
    each node's observation, mask and state as it sees them when the teacher's earlier
    actions are taken, the teacher's action, and the round's return-to-go."""
    import numpy as np

    from mara_agents.evaluation.registry import make_scheduler
    from mara_agents.policy.features import make_wrapped_env
    from mara_agents.training.clone import collect_demonstrations
    from mara_agents.training.experiment import parse_experiment
    from mara_env.schedulers import SchedulerAgent

    env_config = {"num_nodes": 4, "num_slots": 3, "horizon": 15, "split": "train"}
    exp = parse_experiment(
        {"name": "t", "env": env_config, "wrapper": "wls", "pretrain": {"scheduler": "edf"}}
    )
    got = collect_demonstrations(exp, [1])
    env = make_wrapped_env(exp.env_config())
    teacher = SchedulerAgent(make_scheduler("edf"))
    env.reset(seed=1)
    teacher.reset(env, 1)
    want: dict[str, list] = {"obs": [], "mask": [], "state": [], "action": []}
    rewards = []
    for name in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        action = teacher.act(env, name)
        for key, value in zip(want, (obs["observation"], obs["action_mask"], obs["state"])):
            want[key].append(value)
        want["action"].append(action)
        env.step(action)
        if name == env.possible_agents[-1]:
            rewards.append(float(env.rewards[name]))
    got["state"] = np.concatenate([got["obs"], got["queue"]], 1)  # what the critic reads
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], np.asarray(value, got[key].dtype), err_msg=key)
    to_go = np.cumsum(rewards[::-1])[::-1]
    assert len(rewards) > 5  # an episode with rounds
    np.testing.assert_allclose(got["return"], np.repeat(to_go, 4).astype(np.float32))


def test_consistent_labels_follow_the_teacher_until_the_clone_deviates() -> None:
    """Without a deviation every node keeps the teacher's label; after one, a node whose
    slot the earlier nodes filled stays on its own slot if that still wants nodes, and an
    idle label goes where nodes are still wanted, so the round ends on the teacher's counts."""
    import numpy as np

    from mara_agents.training.clone import consistent_labels

    rng = np.random.default_rng(0)
    for _ in range(200):
        k, n = 4, 9
        labels = rng.integers(0, k + 1, n)
        node_slot = rng.integers(-1, k, n)
        np.testing.assert_array_equal(consistent_labels(labels, labels, node_slot, k), labels)
    # slots 0 and 1, idle = 2; the teacher keeps nodes 0 and 1 on slot 0, moves node 2 to
    # slot 1 and idles node 3; the clone's node 0 went to slot 1 instead
    labels, node_slot = np.array([0, 0, 1, 2]), np.array([0, 0, 0, -1])
    taken = np.array([1, 0, 0, 2])
    got = consistent_labels(labels, taken, node_slot, 2)
    np.testing.assert_array_equal(got, [0, 0, 0, 2])  # node 2 stays: slot 1 is full
    assert np.bincount(taken, minlength=3)[:2].tolist() == np.bincount(labels)[:2].tolist()
    # an idle label while a slot wants more nodes than those still to choose that served it
    got = consistent_labels(np.array([1, 2]), np.array([0, 2]), np.array([-1, -1]), 2)
    np.testing.assert_array_equal(got, [1, 1])


def test_demonstrations_do_not_depend_on_the_worker_count() -> None:
    """Episodes played in two worker processes give the arrays one process gives, in seed
    order (the teacher acting, and a policy driving while the teacher labels)."""
    import numpy as np
    import torch

    from mara_agents.policy.features import make_wrapped_env
    from mara_agents.policy.network import MaraNet, model_config_from
    from mara_agents.training.clone import collect_demonstrations, env_layout
    from mara_agents.training.experiment import parse_experiment

    env_config = {"num_nodes": 4, "num_slots": 3, "horizon": 12, "split": "train"}
    exp = parse_experiment(
        {"name": "t", "env": env_config, "wrapper": "wls", "pretrain": {"scheduler": "edf"}}
    )
    torch.manual_seed(0)
    net = MaraNet(env_layout(make_wrapped_env(exp.env_config())), model_config_from(exp.model))
    for policy in (None, net.eval()):
        one = collect_demonstrations(exp, [1, 2, 3], policy=policy, workers=1)
        two = collect_demonstrations(exp, [1, 2, 3], policy=policy, workers=2)
        assert one.keys() == two.keys()
        for key in one:
            np.testing.assert_array_equal(one[key], two[key], err_msg=key)
