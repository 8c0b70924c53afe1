"""The MARA environment for RLlib: env creators, registered under two ids.

``mara_env`` stays free of ray; this module adapts its AEC env (optionally wrapped by the
predictor observation wrapper, :func:`flow_predictor.wrapper.wrap`) to RLlib:

* :data:`mara_env.ENV_ID` (``mara/ComputeCluster-v1``): the AEC env as a turn-based
  ``MultiAgentEnv`` through :class:`ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`
  (one RLlib step per node decision);
* :data:`ROUND_ENV_ID`: :class:`mara_env.round_env.RoundEnv` over that same (wrapped) AEC
  env, a single-agent env whose step is one decision round of all nodes.  With
  ``env_config["loads"]`` (an experiment's ``train_loads``) it is a :class:`MixedLoadRoundEnv`
  whose episodes cycle through those loads.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from pettingzoo import AECEnv
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

from flow_predictor.wrapper import wrap
from mara_env import ENV_ID, ClusterConfig
from mara_env.cluster_env import env as make_aec_env
from mara_env.round_env import WORKLOAD_SEED, RoundEnv

ROUND_ENV_ID = "mara/ComputeClusterRounds-v0"


def make_wrapped_env(env_config: dict[str, Any]) -> AECEnv:
    """The AEC env for ``{"cluster": {...}, "wrapper": ..., "wrapper_options": {...}}``."""
    cluster = ClusterConfig.from_dict(dict(env_config.get("cluster", {})))
    return wrap(
        make_aec_env(config=cluster),
        env_config.get("wrapper", "none"),
        env_config.get("wrapper_options"),
    )


def env_creator(env_config: dict[str, Any]) -> PettingZooEnv:
    """RLlib env creator: the (wrapped) AEC env as a turn-based ``MultiAgentEnv``."""
    return PettingZooEnv(make_wrapped_env(dict(env_config)))


class MixedLoadRoundEnv(gymnasium.Env):
    """Round envs that differ only in their load; each episode runs on the next in turn.

    The envs share spaces, so a policy trains on a mix of loads without knowing which.
    A seeded reset with seed ``s`` seeds every load's env (from
    :class:`numpy.random.SeedSequence` children of ``s``) and runs on load
    ``loads[s % len(loads)]``; each later episode runs on the next load in turn.  The same
    seed gives the same sequence of episodes, and envs reset with different seeds (such as
    the groups of :class:`mara_agents.group.GroupedEnvRunner`) spread over the loads.
    :meth:`render` draws the env of the episode under way (its load in the header).
    """

    metadata = RoundEnv.metadata

    def __init__(self, envs: list[RoundEnv]) -> None:
        if not envs:
            raise ValueError("MixedLoadRoundEnv: expected at least one env")
        self.envs = envs
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        self.loads = [e.engine.config.load for e in envs]
        modes = {e.render_mode for e in envs}
        if len(modes) > 1:
            raise ValueError(f"MixedLoadRoundEnv: the envs' render modes differ: {modes}")
        self.render_mode = modes.pop()
        self._next = 0
        self.current = envs[0]

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            self.current = self.envs[self._next]
            self._next = (self._next + 1) % len(self.envs)
            return self.current.reset(options=options)
        children = np.random.SeedSequence(seed).generate_state(len(self.envs))
        for env, child in zip(self.envs, children):  # each continues from here on its turn
            env.reset(seed=int(child), options=options)
        first = seed % len(self.envs)
        self.current, self._next = self.envs[first], (first + 1) % len(self.envs)
        return self.current.observe(), {WORKLOAD_SEED: seed}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        return self.current.step(action)

    def render(self) -> str | None:
        frame = self.current.render()
        if frame is None:
            return None
        return f"load {self.current.engine.config.load:g}\n{frame}"


def round_env_creator(env_config: dict[str, Any]) -> RoundEnv | MixedLoadRoundEnv:
    """RLlib env creator: one decision round of all nodes per step, over the same env
    (with ``env_config["loads"]``: one such env per load, episodes taking turns;
    ``env_config["render_mode"]``: ``"ansi"`` or None)."""
    config = dict(env_config)
    loads = config.pop("loads", None)
    mode = config.pop("render_mode", None)
    if not loads:
        return RoundEnv(make_wrapped_env(config), render_mode=mode)
    envs = []
    for load in loads:
        cluster = {**config.get("cluster", {}), "load": float(load)}
        envs.append(RoundEnv(make_wrapped_env({**config, "cluster": cluster}), render_mode=mode))
    return MixedLoadRoundEnv(envs)


def register() -> str:
    """Register both creators with Ray Tune; returns the node-level id
    (:data:`mara_env.ENV_ID`; the round-level one is :data:`ROUND_ENV_ID`)."""
    register_env(ENV_ID, env_creator)
    register_env(ROUND_ENV_ID, round_env_creator)
    return ENV_ID


register()
