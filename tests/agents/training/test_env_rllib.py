"""RLlib's multi-agent env checker on the PettingZoo env through RLlib's own wrappers."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from ray.rllib.utils.pre_checks.env import check_multiagent_environments

from mara_env.cluster_env import env, parallel_env
from tests.conftest import SMALL


def test_rllib_checker_accepts_aec_env():
    wrapped = PettingZooEnv(env(**SMALL))
    check_multiagent_environments(wrapped)


def test_rllib_checker_accepts_parallel_env():
    check_multiagent_environments(ParallelPettingZooEnv(parallel_env(**SMALL)))


def test_rllib_wrapper_episode_returns_completions_for_every_agent():
    wrapped = PettingZooEnv(env(**SMALL))
    obs, _ = wrapped.reset(seed=5)
    rng = np.random.default_rng(0)
    returns: dict[str, float] = {}
    while True:
        ((agent, o),) = obs.items()
        action = int(rng.choice(np.flatnonzero(o["action_mask"])))
        obs, rew, term, trunc, _ = wrapped.step({agent: action})
        for a, r in rew.items():
            returns[a] = returns.get(a, 0.0) + r
        if term["__all__"] or trunc["__all__"]:
            break
    done = int(wrapped.env.unwrapped.engine.sim.metrics()["completed"])
    assert all(abs(r - done) < 1e-9 for r in returns.values())


def test_mixed_load_round_env_cycles_loads_and_repeats_with_its_seed():
    from mara_agents.training.rllib_env import round_env_creator
    from mara_env.round_env import MixedRoundEnv

    config = {"cluster": dict(SMALL), "wrapper": "none", "loads": [0.5, 2.0]}

    def run(seed: int) -> tuple[list[float], list[np.ndarray]]:
        e = round_env_creator(config)
        assert isinstance(e, MixedRoundEnv) and e.loads == [0.5, 2.0]
        loads, firsts = [], []
        for episode in range(4):
            obs, _ = e.reset(seed=seed if episode == 0 else None)
            loads.append(e.current.engine.config.load)
            firsts.append(obs["slots"].copy())
            done = False
            while not done:
                obs, _, term, trunc, _ = e.step(np.full(SMALL["num_nodes"], SMALL["num_slots"]))
                done = term or trunc
        return loads, firsts

    loads, a = run(3)
    assert loads == [2.0, 0.5, 2.0, 0.5]  # a seeded reset starts at loads[seed % 2]
    assert run(4)[0] == [0.5, 2.0, 0.5, 2.0]
    _, b = run(3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    plain = round_env_creator({"cluster": dict(SMALL), "wrapper": "none"})
    assert plain.engine.config.load == 1.0


def test_mixed_load_round_env_renders_the_episode_under_way():
    from mara_agents.training.rllib_env import round_env_creator
    from mara_env.round_env import MixedRoundEnv, RoundEnv

    config = {"cluster": dict(SMALL), "wrapper": "none", "loads": [0.5, 2.0]}
    e = round_env_creator({**config, "render_mode": "ansi"})
    e.reset(seed=1)
    e.step(np.zeros(SMALL["num_nodes"], np.int64))
    frame = e.render()
    assert frame.startswith("load 2, synthetic\n")
    assert frame.endswith(e.current.engine.render_ansi())
    with pytest.warns(UserWarning, match="render_mode"):  # no render mode: no frame
        assert round_env_creator(config).render() is None
    quiet, loud = (RoundEnv(render_mode=m, **SMALL) for m in (None, "ansi"))
    with pytest.raises(ValueError, match="render modes differ"):
        MixedRoundEnv([quiet, loud])
    with pytest.raises(ValueError, match="spaces differ"):
        MixedRoundEnv([quiet, RoundEnv(**{**SMALL, "num_nodes": SMALL["num_nodes"] + 1})])


def test_mixed_round_env_crosses_loads_with_workloads():
    """``train_jobs`` crossed with ``train_loads``: synthetic and replayed episodes take
    turns, in the order of the loads, then the workloads."""
    from mara_agents.training.rllib_env import round_env_creator

    config = {"cluster": dict(SMALL), "wrapper": "none", "loads": [1.0, 2.0]}
    e = round_env_creator({**config, "jobs": [None, "philly"]})
    assert e.loads == [1.0, 1.0, 2.0, 2.0] and e.workloads == [None, "philly"] * 2
    seen = []
    for episode in range(4):
        e.reset(seed=8 if episode == 0 else None)
        seen.append((e.current.engine.config.load, e.current.engine.config.jobs))
    assert seen == [(1.0, None), (1.0, "philly"), (2.0, None), (2.0, "philly")]
    replayed = round_env_creator({**config, "jobs": ["philly"]})
    assert replayed.workloads == ["philly", "philly"]
