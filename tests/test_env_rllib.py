"""RLlib's multi-agent env checker on the PettingZoo env through RLlib's own wrappers."""

from __future__ import annotations

import numpy as np
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
