"""The MARA environment for RLlib: env creators, registered under two ids.

``mara_env`` stays free of ray; this module adapts its AEC env (optionally wrapped by the
predictor observation wrapper, :func:`flow_predictor.wrapper.wrap`) to RLlib:

* :data:`mara_env.ENV_ID` (``mara/ComputeCluster-v1``): the AEC env as a turn-based
  ``MultiAgentEnv`` through :class:`ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`
  (one RLlib step per node decision);
* :data:`ROUND_ENV_ID`: :class:`mara_env.round_env.RoundEnv` over that same (wrapped) AEC
  env, a single-agent env whose step is one decision round of all nodes.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

from flow_predictor.wrapper import wrap
from mara_env import ENV_ID, ClusterConfig
from mara_env.cluster_env import env as make_aec_env
from mara_env.round_env import RoundEnv

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


def round_env_creator(env_config: dict[str, Any]) -> RoundEnv:
    """RLlib env creator: one decision round of all nodes per step, over the same env."""
    return RoundEnv(make_wrapped_env(dict(env_config)))


def register() -> str:
    """Register both creators with Ray Tune; returns the node-level id
    (:data:`mara_env.ENV_ID`; the round-level one is :data:`ROUND_ENV_ID`)."""
    register_env(ENV_ID, env_creator)
    register_env(ROUND_ENV_ID, round_env_creator)
    return ENV_ID


register()
