"""MARA's PPO learner: RLlib's PPO learner with two additions an experiment turns on.

* **Group-relative advantages** (``advantage: {estimator: group | group_gae}``):
  :class:`~mara_agents.training.group.GroupRelativeAdvantages` replaces RLlib's GAE in the
  learner pipeline (:mod:`mara_agents.training.group`).
* **A critic warm-up, then a ramp of the actor's learning rate** (``warmup:
  {critic_steps: C, actor_ramp_steps: R}``).  PPO from a cloned policy starts with a critic
  that does not know that policy's values, so its first advantages are mostly noise, and
  full-size steps on them pull the clone away from what it copied.  Here the actor and the
  critic get one Adam each: the critic's learning rate is ``rllib.training.lr`` from the
  start, the actor's is 0 for the first ``C`` env steps sampled (RLlib's lifetime count:
  decision rounds in the round view) and then rises linearly to ``lr`` over the next
  ``R`` (PIRLNav, Ramrakhya et al. 2023).  ``critic_lr`` sets the critic's rate apart (a
  privileged critic's new inputs start at weight 0).  With all unset (the default) the
  learner has RLlib's one optimizer, as before the section existed.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.learner import GeneralAdvantageEstimation

from mara_agents.training.group import (
    BASELINES,
    ESTIMATOR_KEY,
    GroupRelativeAdvantages,
    group_size,
)

# learner_config_dict keys of the warm-up (env steps sampled, lifetime)
CRITIC_STEPS_KEY, ACTOR_RAMP_KEY, CRITIC_LR_KEY = "critic_steps", "actor_ramp_steps", "critic_lr"
ACTOR, CRITIC = "actor", "critic"  # the optimizers' names (learners/<module>/<name>_learning_rate)


def actor_lr_schedule(lr: float, critic_steps: int, ramp_steps: int) -> list[list[float]]:
    """RLlib's piecewise-linear ``[[timestep, lr], ...]`` of the actor: 0 for
    ``critic_steps`` env steps, then linear to ``lr`` over ``ramp_steps`` (at least one
    step), then ``lr``."""
    points = [[0, 0.0]]
    if critic_steps:
        points.append([critic_steps, 0.0])
    points.append([critic_steps + max(ramp_steps, 1), float(lr)])
    return points


def warmup_of(config: Any) -> tuple[int, int]:
    """``(critic_steps, actor_ramp_steps)`` an algorithm config asks for ((0, 0): none)."""
    extra = config.learner_config_dict or {}
    return int(extra.get(CRITIC_STEPS_KEY, 0)), int(extra.get(ACTOR_RAMP_KEY, 0))


def critic_lr_of(config: Any) -> Any:
    """The critic's learning rate an algorithm config asks for (``warmup.critic_lr``, else
    ``lr``); None where the actor and critic share RLlib's one optimizer."""
    critic_steps, ramp_steps = warmup_of(config)
    extra = config.learner_config_dict or {}
    if not (critic_steps or ramp_steps or CRITIC_LR_KEY in extra):
        return None
    return extra.get(CRITIC_LR_KEY, config.lr)


class MaraPPOLearner(PPOTorchLearner):
    """RLlib's PPO learner with group-relative advantages and the actor's warm-up (module
    doc), each only when the config asks for it (``learner_config_dict``)."""

    def build(self) -> None:
        super().build()
        if group_size(self.config) and self._learner_connector is not None:
            compare = BASELINES[self.config.learner_config_dict[ESTIMATOR_KEY]]
            self._learner_connector.remove(GeneralAdvantageEstimation.__name__)
            self._learner_connector.append(
                GroupRelativeAdvantages(
                    compare=compare, gamma=self.config.gamma, lambda_=self.config.lambda_
                )
            )

    def configure_optimizers_for_module(self, module_id: Any, config: Any = None) -> None:
        critic_steps, ramp_steps = warmup_of(config)
        critic_lr = critic_lr_of(config)
        if critic_lr is None:
            super().configure_optimizers_for_module(module_id, config)
            return
        module = self._module[module_id]
        critic = module.net.critic_parameters()
        mine = {id(p) for p in critic}
        actor = [p for p in self.get_parameters(module) if id(p) not in mine]
        for name, params, lr in (
            (CRITIC, critic, critic_lr),
            (ACTOR, actor, actor_lr_schedule(config.lr, critic_steps, ramp_steps)),
        ):
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=torch.optim.Adam(params),
                params=params,
                lr_or_lr_schedule=lr,
            )
