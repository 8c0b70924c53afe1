"""The MARA environment for RLlib: env creator and registration under ``mara/ComputeCluster-v0``.

``mara_env`` stays free of ray; this module adapts its AEC env (optionally wrapped by the
predictor observation wrapper, :func:`flow_predictor.wrapper.wrap`) to RLlib's
``MultiAgentEnv`` through :class:`ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

from flow_predictor.wrapper import wrap
from mara_env import ENV_ID, ClusterConfig
from mara_env.cluster_env import env as make_aec_env


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


def register() -> str:
    """Register the creator with Ray Tune under :data:`mara_env.ENV_ID`; returns the id."""
    register_env(ENV_ID, env_creator)
    return ENV_ID


register()
