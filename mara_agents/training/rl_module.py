"""MARA's policy as RLlib modules: :class:`~mara_agents.policy.network.MaraNet` on the new API
stack.

Two views of one network (the same weights act identically in both):

* :class:`MaraRLModule`: one node decision per RLlib step, for the AEC env through
  RLlib's ``PettingZooEnv``; one module (id :data:`SHARED_MODULE_ID`) serves every node.
* :class:`MaraRoundModule`: one decision round of all N nodes per RLlib step, for
  :class:`mara_env.round_env.RoundEnv`.  It decodes the N node actions autoregressively
  in one forward pass over the batch of envs (node ``i`` sees the choices of nodes
  ``< i``, as in the AEC env: the Multi-Agent Transformer's decoder; the slots are
  encoded once per round), returns the joint action and its log-probability (the sum
  over nodes), and is trained with teacher forcing (all N nodes' logits in one batched
  call given the round's actions).  The decoding itself is :mod:`mara_agents.policy.rounds`.

The network itself is plain torch in :mod:`mara_agents.policy.network`, so acting from a policy
file needs no ray.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchDistribution,
)
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from mara_agents.policy.network import MaraNet, ObsLayout, model_config_from
from mara_agents.policy.policy_file import warm_start_weights
from mara_agents.policy.rounds import decode, round_value, teacher_forced_logits
from mara_agents.training.privileged import critic_inputs, privileged_widths

SHARED_MODULE_ID = "shared"


def _build_net(
    module: TorchRLModule, layout: ObsLayout, privileged: tuple[int, int] = (0, 0)
) -> MaraNet:
    """The module's network (its critic reading ``privileged`` columns);
    ``model_config["init_weights"]``: a state dict or policy file to load
    (:func:`~mara_agents.policy.policy_file.warm_start_weights`; the privileged columns'
    weights start at 0 where it has none)."""
    net = MaraNet(layout, model_config_from(module.model_config), privileged)
    init = (module.model_config or {}).get("init_weights")
    if init:
        net.warm_start(warm_start_weights(init))
    return net


class MaraRLModule(TorchRLModule, ValueFunctionAPI):
    """RLlib (new API stack) wrapper of :class:`MaraNet` for PPO, one node per step.

    ``model_config`` holds :class:`~mara_agents.policy.network.ModelConfig` fields and optionally
    ``init_weights``: a path to a ``MaraNet`` state dict (e.g. from behaviour cloning) or
    a policy file, loaded at setup.
    """

    def setup(self) -> None:
        space = self.observation_space
        self.layout = ObsLayout.infer(
            space["observation"].shape[0], space["state"].shape[0], int(self.action_space.n)
        )
        self.net = _build_net(self, self.layout)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        return {Columns.ACTION_DIST_INPUTS: self.net.logits(obs["observation"], obs["action_mask"])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.net.value(batch[Columns.OBS]["state"])


# ---- one decision round per step ---------------------------------------------------------
def round_layout(space: spaces.Dict) -> ObsLayout:
    """The per-node observation layout behind a :class:`RoundEnv` observation space."""
    k, slot_dim = space["slots"].shape
    node_dim = space["nodes"].shape[1]
    obs_dim = node_dim + k * slot_dim
    return ObsLayout.infer(obs_dim, obs_dim + space["queue"].shape[0], k + 1)


class RoundDistribution(TorchDistribution):
    """The joint distribution of a round's ``N`` node actions, each categorical over its
    ``K + 1`` logits: RLlib's ``TorchMultiCategorical`` with ``N`` equal parts (log-prob,
    entropy and KL are sums over the nodes), as one torch ``Categorical`` over
    ``(..., N, K + 1)`` instead of ``N`` of them, which is a few operations in the PPO
    loss instead of a few per node."""

    def __init__(self, logits: torch.Tensor, num_nodes: int) -> None:
        super().__init__(logits=logits.unflatten(-1, (num_nodes, -1)))

    def _get_torch_distribution(self, logits: torch.Tensor) -> torch.distributions.Categorical:
        # no argument checks: the module's masked logits are finite and the actions its own
        # (the checks cost a third of the distribution's time in the PPO loss)
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    def logp(self, value: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self._dist.log_prob(value).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self._dist.entropy().sum(-1)

    def kl(self, other: RoundDistribution) -> torch.Tensor:
        """KL(self || other), summed over the nodes: sum p (log p - log q) on the normalised
        logits.  torch's Categorical KL is inf wherever ``other``'s probability underflows to
        0 in float32 (a sharp policy's far tail, a logit gap above about 104) while this
        one's does not; PPO's adaptive KL coefficient then grows on a meaningless inf."""
        p, q = self._dist, other._dist
        return (p.probs * (p.logits - q.logits)).sum((-2, -1))

    def to_deterministic(self) -> TorchDeterministic:
        return TorchDeterministic(loc=self._dist.logits.argmax(-1))

    @staticmethod
    def required_input_dim(space: spaces.MultiDiscrete, **kwargs: Any) -> int:
        return int(sum(space.nvec))

    @classmethod
    def from_logits(cls, logits: torch.Tensor, num_nodes: int, **kwargs: Any) -> RoundDistribution:
        """The distribution of flat logits ``(..., N * (K + 1))``."""
        return cls(logits, num_nodes)


class MaraRoundModule(TorchRLModule, ValueFunctionAPI):
    """RLlib module over :class:`~mara_env.round_env.RoundEnv`: the MAT-style decoder.

    Outputs ``ACTIONS`` ``(B, N)``, ``ACTION_LOGP`` (sum of the N nodes' log-probs) and
    ``ACTION_DIST_INPUTS`` ``(B, N * (K + 1))``: node ``i``'s masked logits given the
    actions of nodes ``< i``, read by :class:`RoundDistribution` (whose log-prob of the
    round's actions is then that same sum).  The critic reads the round's global state
    (node 0's, before anyone chose) once per round, and the privileged columns of a
    :class:`~mara_agents.training.privileged.PrivilegedRoundEnv` where the observation
    holds them (the actor never reads them).  ``model_config`` as :class:`MaraRLModule`'s.
    """

    def setup(self) -> None:
        self.layout = round_layout(self.observation_space)
        self.num_nodes = self.observation_space["nodes"].shape[0]
        privileged = privileged_widths(self.observation_space)
        self.net = _build_net(self, self.layout, privileged)
        self._dist_cls = RoundDistribution.get_partial_dist_cls(num_nodes=self.num_nodes)

    def get_inference_action_dist_cls(self) -> type:
        return self._dist_cls

    def get_exploration_action_dist_cls(self) -> type:
        return self._dist_cls

    def get_train_action_dist_cls(self) -> type:
        return self._dist_cls

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        actions, _, logits = decode(self.net, batch[Columns.OBS], greedy=True)
        return {Columns.ACTIONS: actions, Columns.ACTION_DIST_INPUTS: logits.flatten(1)}

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        actions, logp, logits = decode(self.net, batch[Columns.OBS], greedy=False)
        return {
            Columns.ACTIONS: actions,
            Columns.ACTION_LOGP: logp,
            Columns.ACTION_DIST_INPUTS: logits.flatten(1),
        }

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits = teacher_forced_logits(self.net, batch[Columns.OBS], batch[Columns.ACTIONS])
        return {Columns.ACTION_DIST_INPUTS: logits.flatten(1)}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        return round_value(self.net, obs, critic_inputs(obs))
