"""The MARA environment for RLlib: env creators, registered under two ids.

``mara_env`` stays free of ray; this module adapts its AEC env (optionally wrapped by the
predictor observation wrapper, :func:`flow_predictor.wrapper.wrap`) to RLlib:

* :data:`mara_env.ENV_ID` (``mara/ComputeCluster-v1``): the AEC env as a turn-based
  ``MultiAgentEnv`` through :class:`ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`
  (one RLlib step per node decision);
* :data:`ROUND_ENV_ID`: :class:`mara_env.round_env.RoundEnv` over that same (wrapped) AEC
  env, a single-agent env whose step is one decision round of all nodes.  With
  ``env_config["loads"]`` (an experiment's ``train_loads``) it is a :class:`MixedLoadRoundEnv`
  whose episodes cycle through those loads (both in ``mara_env.round_env``; the
wrapped AEC env comes from :func:`flow_predictor.wrapper.make_wrapped_env`).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

from flow_predictor.wrapper import make_wrapped_env
from mara_env import ENV_ID
from mara_env.round_env import MixedLoadRoundEnv, RoundEnv

ROUND_ENV_ID = "mara/ComputeClusterRounds-v0"


def env_creator(env_config: dict[str, Any]) -> PettingZooEnv:
    """RLlib env creator: the (wrapped) AEC env as a turn-based ``MultiAgentEnv``."""
    return PettingZooEnv(make_wrapped_env(dict(env_config)))


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
