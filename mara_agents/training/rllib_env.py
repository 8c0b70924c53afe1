"""The MARA environment for RLlib: env creators, registered under two ids.

``mara_env`` stays free of ray; this module adapts its AEC env (optionally wrapped by the
predictor observation wrapper, :func:`mara_agents.policy.features.wrap`) to RLlib:

* :data:`mara_env.ENV_ID` (``mara/ComputeCluster-v3``): the AEC env as a turn-based
  ``MultiAgentEnv`` through :class:`ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`
  (one RLlib step per node decision);
* :data:`ROUND_ENV_ID`: :class:`mara_env.round_env.RoundEnv` over that same (wrapped) AEC
  env, a single-agent env whose step is one decision round of all nodes.  With
  ``env_config["loads"]`` or ``env_config["jobs"]`` (an experiment's ``train_loads`` and
  ``train_jobs``) it is a :class:`MixedRoundEnv` whose episodes cycle through those loads
  and workloads (both in ``mara_env.round_env``; the
  wrapped AEC env comes from :func:`mara_agents.policy.features.make_wrapped_env`).  With
  ``env_config["privileged"]`` (an experiment's ``critic.privileged``) each round env is a
  :class:`~mara_agents.training.privileged.PrivilegedRoundEnv`: the critic's columns too.

An env runner with :data:`VECTOR_MODE` (``config.env_runners(gym_env_vectorize_mode=...)``)
asks the round creator for all its envs at once (``env_config["num_envs"]``) and gets a
:class:`RoundVectorEnv`: the envs share one predictor, and each step predicts the new or
grown tasks of all of them in one call and their features in one pass
(:func:`flow_predictor.wrapper.features_together`) instead of once per env.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

from flow_predictor.wrapper import features_together
from mara_agents.policy.features import make_wrapped_env, policy_predictor
from mara_agents.training.privileged import PrivilegedRoundEnv
from mara_env import ENV_ID
from mara_env.round_env import MixedRoundEnv, RoundEnv

ROUND_ENV_ID = "mara/ComputeClusterRounds-v1"
# RLlib's setting that makes an env runner build its envs through the creator at once
VECTOR_MODE = {"gym_env_vectorize_mode": "vector_entry_point"}


def env_creator(env_config: dict[str, Any]) -> PettingZooEnv:
    """RLlib env creator: the (wrapped) AEC env as a turn-based ``MultiAgentEnv``."""
    return PettingZooEnv(make_wrapped_env(dict(env_config)))


def _round_env(config: dict[str, Any], predictor: Any) -> RoundEnv | MixedRoundEnv:
    """One round env of ``config`` (its loads and workloads taking turns), wrapped with
    ``predictor``; with ``config["privileged"]`` (feature names) its observations hold the
    critic's privileged columns too (:class:`PrivilegedRoundEnv`)."""
    loads = config.pop("loads", None)
    workloads = config.pop("jobs", None)
    mode = config.pop("render_mode", None)
    privileged = tuple(config.pop("privileged", None) or ())

    def rounds(aec: Any) -> RoundEnv:
        if privileged:
            return PrivilegedRoundEnv(aec, privileged, render_mode=mode)
        return RoundEnv(aec, render_mode=mode)

    if not loads and not workloads:
        return rounds(make_wrapped_env(config, predictor))
    # each env's changes to the cluster config: a load, then a workload, in turn
    mix = [{"load": float(load)} for load in loads] if loads else [{}]
    if workloads:
        mix = [{**change, "jobs": jobs} for change in mix for jobs in workloads]
    envs = []
    for change in mix:
        cluster = {**config.get("cluster", {}), **change}
        envs.append(rounds(make_wrapped_env({**config, "cluster": cluster}, predictor)))
    return MixedRoundEnv(envs)


def round_env_creator(env_config: dict[str, Any]) -> RoundEnv | MixedRoundEnv | RoundVectorEnv:
    """RLlib env creator: one decision round of all nodes per step, over the same env
    (with ``env_config["loads"]`` and/or ``env_config["jobs"]``: one such env per load and
    workload, episodes taking turns;
    ``env_config["render_mode"]``: ``"ansi"`` or None; ``env_config["num_envs"]``: that many
    such envs as one :class:`RoundVectorEnv`)."""
    config = dict(env_config)
    num_envs = config.pop("num_envs", None)
    if num_envs is None:
        return _round_env(config, None)
    predictor = policy_predictor(config.get("wrapper", "none"), config.get("wrapper_options"))
    return RoundVectorEnv([_round_env(dict(config), predictor) for _ in range(int(num_envs))])


class RoundVectorEnv(SyncVectorEnv):
    """Round envs stepped together (gymnasium's synchronous vector env, next-step autoreset).

    A step plays every env's round first, then computes the predictor features of all of
    them together (one predictor call for their new or grown tasks, one pass over their
    slots), then builds each observation: the same observations as stepping the envs one
    by one, with one predictor call per step instead of one per env.
    """

    def __init__(self, envs: list[RoundEnv | MixedRoundEnv]) -> None:
        super().__init__([lambda env=env: env for env in envs])

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self.autoreset_mode != AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"RoundVectorEnv: autoreset mode {self.autoreset_mode}; expected next-step"
            )
        infos: dict[str, Any] = {}
        played = []
        for i, action in enumerate(iterate(self.action_space, actions)):
            env = self.envs[i]
            if self._autoreset_envs[i]:
                self._env_obs[i], info = env.reset()
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                rounds = env.current if isinstance(env, MixedRoundEnv) else env
                self._rewards[i], info = rounds.play(action)
                # RoundEnv.step's flags: the engine truncates only an episode not yet done
                self._terminations[i] = rounds.engine.sim.done
                self._truncations[i] = rounds.engine.truncated
                played.append((i, rounds))
            infos = self._add_info(infos, info, i)
        features_together([rounds.aec for _, rounds in played])
        for i, rounds in played:
            self._env_obs[i] = rounds.observe()
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )


def register() -> str:
    """Register both creators with Ray Tune; returns the node-level id
    (:data:`mara_env.ENV_ID`; the round-level one is :data:`ROUND_ENV_ID`)."""
    register_env(ENV_ID, env_creator)
    register_env(ROUND_ENV_ID, round_env_creator)
    return ENV_ID


register()
