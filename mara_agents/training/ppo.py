"""The PPO configuration of an experiment: RLlib's new API stack, one shared module.

* :func:`build_config` turns an experiment into a ``PPOConfig`` (one shared module for all
  nodes, centralized critic, gamma = 1, the experiment's overrides last), with
  :data:`TRAINING_DEFAULTS` and :data:`ENV_RUNNER_DEFAULTS` below them.
* ``view: node`` trains on the AEC env (one RLlib step per node decision, module
  :class:`MaraRLModule` shared by all nodes through :func:`policy_mapping_fn`);
  ``view: round`` on :class:`~mara_env.round_env.RoundEnv` (one step per decision round,
  module :class:`MaraRoundModule`, which decodes the N nodes autoregressively);
  :func:`decisions_per_step` converts RLlib steps into node decisions.
* :class:`MaraMetrics` (the RLlib callback) adds the simulator's :data:`EPISODE_METRICS`
  to the training result (``env_runners/mara/``), and node decisions (``mara/``);
  :mod:`mara_agents.training.curves` writes them to TensorBoard and the learning curves.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from mara_agents.training.experiment import Experiment
from mara_agents.training.group import ESTIMATOR_KEY, GROUP_SIZE_KEY, GroupedEnvRunner
from mara_agents.training.learner import (
    ACTOR_RAMP_KEY,
    CRITIC_LR_KEY,
    CRITIC_STEPS_KEY,
    MaraPPOLearner,
)
from mara_agents.training.rl_module import SHARED_MODULE_ID, MaraRLModule, MaraRoundModule
from mara_agents.training.rllib_env import ROUND_ENV_ID, VECTOR_MODE, register
from mara_env.config import ConfigError

# Episode metrics (from the simulator) logged per episode, averaged per iteration.
EPISODE_METRICS = (
    "completion_rate",
    "completed",
    "expired",
    "tasks",
    "utilisation",
    "reassignments",
    "wasted_node_ticks",
)
TRAINING_DEFAULTS: dict[str, Any] = {
    "gamma": 1.0,
    "lambda_": 0.95,
    "lr": 3e-4,
    "train_batch_size_per_learner": 8000,
    "minibatch_size": 1000,
    "num_epochs": 4,
    "entropy_coeff": 0.01,
    "vf_loss_coeff": 0.5,
    "vf_clip_param": 1000.0,
    "clip_param": 0.2,
    "grad_clip": 1.0,
}
ENV_RUNNER_DEFAULTS: dict[str, Any] = {
    "num_env_runners": 1,
    "num_envs_per_env_runner": 4,
    # RLlib's 60 s is too short for big batches on a busy machine, and one timeout stalls
    # training for good (the late sample calls queue up on the runners); see MaraMetrics.
    "sample_timeout_s": 600.0,
}


class SamplingStalled(RuntimeError):
    """An iteration got no samples from the env runners (their sample calls timed out)."""


def policy_mapping_fn(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """Every node uses the shared module (parameter sharing)."""
    return SHARED_MODULE_ID


def decisions_per_step(config: Any) -> int:
    """Node decisions per RLlib env step: N for the round view, 1 for the node view."""
    return int(config.env_config["cluster"]["num_nodes"]) if config.env == ROUND_ENV_ID else 1


class MaraMetrics(RLlibCallback):
    """Log the simulator's episode metrics (``infos["episode"]``) under ``mara/``, and
    node decisions (lifetime, and per second of wall time in each iteration) under
    ``mara/`` of the training result."""

    def on_environment_created(self, *, env_runner: Any = None, **kwargs: Any) -> None:
        # Env runners infer one step at a time: intra-op threads only add contention
        # (on a busy 2-core machine a tiny layer_norm took 10 ms with 2 threads).
        torch.set_num_threads(1)

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        self._clock = time.perf_counter()

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        now = time.perf_counter()
        elapsed, self._clock = now - getattr(self, "_clock", now), now
        per_step = decisions_per_step(algorithm.config)
        runners = result.get("env_runners", {})
        steps = float(runners.get("num_env_steps_sampled", 0.0))
        if not steps > 0:  # 0 or nan: RLlib only logs a warning and trains on nothing
            timeout = algorithm.config.sample_timeout_s
            raise SamplingStalled(
                f"iteration {result.get('training_iteration', '?')}: no samples from the env "
                f"runners within sample_timeout_s={timeout} s; once a sample call times out "
                "RLlib keeps training on nothing. Expected a batch within the timeout: raise "
                "rllib.env_runners.sample_timeout_s, or lower "
                "rllib.training.train_batch_size_per_learner or num_envs_per_env_runner, "
                "or leave the cores to the run"
            )
        lifetime = float(runners.get("num_env_steps_sampled_lifetime", 0.0))
        result["mara"] = {
            "node_decisions": lifetime * per_step,
            "node_decisions_per_s": steps * per_step / elapsed if elapsed > 0 else float("nan"),
        }

    def on_episode_end(
        self,
        *,
        episode: Any,
        prev_episode_chunks: list[Any] | None = None,
        metrics_logger: Any = None,
        **kwargs: Any,
    ) -> None:
        if metrics_logger is None:
            return
        chunks = [*(prev_episode_chunks or []), episode]
        # The episode may have been sampled in several chunks; the team return is the
        # round view's return, or one node's, summed over all of them.
        if hasattr(episode, "agent_episodes"):
            last = {aid: sa.get_infos()[-1:] for aid, sa in episode.agent_episodes.items()}
            final = [(aid, i[0]["episode"]) for aid, i in last.items() if i and "episode" in i[0]]
            if not final:
                return
            agent, info = final[0]
            team_return = sum(
                chunk.agent_episodes[agent].get_return()
                for chunk in chunks
                if agent in chunk.agent_episodes
            )
        else:
            last = episode.get_infos()[-1:]
            if not last or "episode" not in last[0]:
                return
            info = last[0]["episode"]
            team_return = sum(chunk.get_return() for chunk in chunks)
        for key in EPISODE_METRICS:
            metrics_logger.log_value(("mara", key), float(info[key]), reduce="mean", window=50)
        # With gamma = 1 the shaped return telescopes to the completions; a gap means a
        # truncated episode (Phi set to 0 early) or a shaping bug.
        metrics_logger.log_value(("mara", "shaped_return"), float(team_return), window=50)
        metrics_logger.log_value(
            ("mara", "shaped_minus_completed"), float(team_return) - info["completed"], window=50
        )


def build_config(
    exp: Experiment, num_env_runners: int | None = None, init_weights: str | None = None
) -> PPOConfig:
    """The PPO config of an experiment (overrides from ``exp.rllib`` applied last).

    ``init_weights``: a ``MaraNet`` state dict (the warm start) every module loads at setup.
    """
    model = dict(exp.model)
    if init_weights:
        model["init_weights"] = str(init_weights)
    runners = {**ENV_RUNNER_DEFAULTS, **exp.rllib.get("env_runners", {})}
    if num_env_runners is not None:
        runners["num_env_runners"] = num_env_runners
    grouped = exp.advantage.estimator != "gae"
    if grouped:
        size, envs = exp.advantage.group_size, runners["num_envs_per_env_runner"]
        if envs % size:
            raise ConfigError(
                f"{exp.path or 'experiment'}: advantage.group_size={size} does not divide "
                f"rllib.env_runners.num_envs_per_env_runner={envs}; expected a divisor "
                "(each runner's envs run in groups that share a workload)"
            )
        # whole episodes, so that every step's return is known (fragments mean nothing
        # then); seeded in groups
        runners.update(
            batch_mode="complete_episodes",
            rollout_fragment_length="auto",
            env_runner_cls=GroupedEnvRunner,
        )
    elif exp.view == "round":
        # the runner's envs share one predictor: one call per step for all of them
        runners = {**VECTOR_MODE, **runners}
    node_env = register()
    config = (
        PPOConfig()
        .environment(
            ROUND_ENV_ID if exp.view == "round" else node_env,
            env_config=exp.env_config(),
            disable_env_checking=True,
        )
        .framework("torch")
        .env_runners(**runners)
        .training(**{**TRAINING_DEFAULTS, **exp.rllib.get("training", {})})
        .callbacks(MaraMetrics)
        .debugging(seed=exp.seed)
    )
    extra: dict[str, Any] = {}
    if grouped:
        extra.update(
            {ESTIMATOR_KEY: exp.advantage.estimator, GROUP_SIZE_KEY: exp.advantage.group_size}
        )
    if exp.warmup.active:
        if not isinstance(config.lr, (int, float)):
            raise ConfigError(
                f"{exp.path or 'experiment'}: warmup with rllib.training.lr={config.lr!r}: "
                "expected one number (the warm-up schedules the actor's learning rate itself)"
            )
        extra.update(
            {CRITIC_STEPS_KEY: exp.warmup.critic_steps, ACTOR_RAMP_KEY: exp.warmup.actor_ramp_steps}
        )
        if exp.warmup.critic_lr is not None:
            extra[CRITIC_LR_KEY] = exp.warmup.critic_lr
    if extra:
        config.learners(learner_class=MaraPPOLearner, learner_config_dict=extra)
    if exp.view == "round":
        config.rl_module(
            rl_module_spec=RLModuleSpec(module_class=MaraRoundModule, model_config=model)
        )
    else:
        config.multi_agent(policies={SHARED_MODULE_ID}, policy_mapping_fn=policy_mapping_fn)
        config.rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    SHARED_MODULE_ID: RLModuleSpec(module_class=MaraRLModule, model_config=model)
                }
            )
        )
    for method, kwargs in exp.rllib.items():
        if method not in ("env_runners", "training"):
            getattr(config, method)(**kwargs)
    _check_together(config, exp.path or "experiment")
    return config


def _check_together(config: PPOConfig, where: str) -> None:
    """The RLlib settings checked against each other (RLlib's own validation), before Ray
    starts; a conflict raises :class:`ConfigError` in one line naming the keys."""
    batch, minibatch = config.train_batch_size_per_learner, config.minibatch_size
    if isinstance(batch, int) and isinstance(minibatch, int) and minibatch > batch:
        raise ConfigError(
            f"{where}: rllib.training.minibatch_size={minibatch}: expected at most "
            f"rllib.training.train_batch_size_per_learner={batch} (minibatches are cut from "
            "each train batch)"
        )
    # RLlib logs a warning about its API stack as it validates: the run says it when it starts
    quiet = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        config.copy(copy_frozen=False).validate()
    except ValueError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{where}: rllib: {first}") from None
    finally:
        quiet.setLevel(level)
