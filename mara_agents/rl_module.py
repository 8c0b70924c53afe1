"""MARA's policy as RLlib modules: :class:`~mara_agents.network.MaraNet` on the new API stack.

Two views of one network (the same weights act identically in both):

* :class:`MaraRLModule`: one node decision per RLlib step, for the AEC env through
  RLlib's ``PettingZooEnv``; one module (id :data:`SHARED_MODULE_ID`) serves every node.
* :class:`MaraRoundModule`: one decision round of all N nodes per RLlib step, for
  :class:`mara_env.round_env.RoundEnv`.  It decodes the N node actions autoregressively
  in one forward pass over the batch of envs (node ``i`` sees the choices of nodes
  ``< i``, as in the AEC env: the Multi-Agent Transformer's decoder), returns the joint
  action and its log-probability (the sum over nodes), and is trained with teacher
  forcing (all N nodes' logits in one batched call given the round's actions).

The network itself is plain torch in :mod:`mara_agents.network`, so acting from a policy
file needs no ray.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from mara_agents.network import MINE_INDEX, MaraNet, ObsLayout, model_config_from

SHARED_MODULE_ID = "shared"


def _build_net(module: TorchRLModule, layout: ObsLayout) -> MaraNet:
    """The module's network; ``model_config["init_weights"]``: a state dict to load."""
    net = MaraNet(layout, model_config_from(module.model_config))
    init = (module.model_config or {}).get("init_weights")
    if init:
        net.load_state_dict(torch.load(init, map_location="cpu", weights_only=True))
    return net


class MaraRLModule(TorchRLModule, ValueFunctionAPI):
    """RLlib (new API stack) wrapper of :class:`MaraNet` for PPO, one node per step.

    ``model_config`` holds :class:`~mara_agents.network.ModelConfig` fields and optionally
    ``init_weights``: a path to a ``MaraNet`` state dict (e.g. from behaviour cloning)
    loaded at setup.
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


def _slot_onehot(slot: torch.Tensor, k: int) -> torch.Tensor:
    """One-hot ``(..., K)`` of slot indices; ``-1`` (none) is an all-zero row."""
    return torch.nn.functional.one_hot(slot + 1, k + 1)[..., 1:]


def node_views(
    obs: dict[str, torch.Tensor],
    nodes: slice | list[int],
    chosen: torch.Tensor,
    pending: torch.Tensor,
    layout: ObsLayout,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the AEC env shows ``nodes`` of a round: flat observations ``(B, M, D)`` and
    masks ``(B, M, K + 1)``, given per node the slot counts ``(B, M, K)`` of earlier
    nodes' choices (``chosen``) and of nodes still to choose that served each slot in
    the last tick (``pending``).  The mapping is :class:`~mara_env.round_env.RoundEnv`'s."""
    lay = layout
    node_rows = obs["nodes"][:, nodes]
    b, m = node_rows.shape[:2]
    cap = obs["slot_cap"].to(torch.float64)
    # As the engine: count * (1 / cap) in float64, then float32.
    inv = (1.0 / cap.clamp(min=1.0))[:, None, :]
    slots = obs["slots"][:, None].expand(b, m, lay.num_slots, lay.slot_dim).clone()
    slots[..., lay.chosen_index] = (chosen.to(torch.float64) * inv).float()
    slots[..., lay.pending_index] = (pending.to(torch.float64) * inv).float()
    slots[..., MINE_INDEX] = _slot_onehot(obs["node_slot"][:, nodes].long(), lay.num_slots).float()
    mask = obs["action_mask"][:, None].expand(b, m, lay.num_slots + 1).clone()
    mask[..., :-1] *= (chosen < cap[:, None, :]).to(mask.dtype)
    return torch.cat([node_rows, slots.flatten(-2)], -1), mask


def _served(obs: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-node one-hots of the slot each node served ``(B, N, K)`` and their sum ``(B, K)``."""
    served = _slot_onehot(obs["node_slot"].long(), k)
    return served, served.sum(1)


def round_views(
    obs: dict[str, torch.Tensor], actions: torch.Tensor, layout: ObsLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node's observation ``(B, N, D)`` and mask ``(B, N, K + 1)`` given the round's
    (valid) ``actions`` ``(B, N)``: node ``i`` sees the actions of nodes ``< i``."""
    k = layout.num_slots
    taken = _slot_onehot(torch.where(actions == k, -1, actions.long()), k)
    served, start = _served(obs, k)
    chosen = taken.cumsum(1) - taken  # choices of earlier nodes
    pending = start[:, None] - (served.cumsum(1) - served)
    return node_views(obs, slice(None), chosen, pending, layout)


class MaraRoundModule(TorchRLModule, ValueFunctionAPI):
    """RLlib module over :class:`~mara_env.round_env.RoundEnv`: the MAT-style decoder.

    Outputs ``ACTIONS`` ``(B, N)``, ``ACTION_LOGP`` (sum of the N nodes' log-probs) and
    ``ACTION_DIST_INPUTS`` ``(B, N * (K + 1))``: node ``i``'s masked logits given the
    actions of nodes ``< i``, read by ``TorchMultiCategorical`` (whose log-prob of the
    round's actions is then that same sum).  The critic reads the round's global state
    (node 0's, before anyone chose) once per round.  ``model_config`` as
    :class:`MaraRLModule`'s.
    """

    def setup(self) -> None:
        self.layout = round_layout(self.observation_space)
        self.num_nodes = self.observation_space["nodes"].shape[0]
        self.net = _build_net(self, self.layout)
        self._dist_cls = TorchMultiCategorical.get_partial_dist_cls(
            input_lens=[self.layout.num_slots + 1] * self.num_nodes
        )

    def get_inference_action_dist_cls(self) -> type:
        return self._dist_cls

    def get_exploration_action_dist_cls(self) -> type:
        return self._dist_cls

    def get_train_action_dist_cls(self) -> type:
        return self._dist_cls

    def decode(
        self, obs: dict[str, torch.Tensor], greedy: bool, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actions ``(B, N)``, their summed log-prob ``(B,)`` and the logits
        ``(B, N, K + 1)``: node after node, each given the earlier nodes' actions."""
        k = self.layout.num_slots
        served, pending = _served(obs, k)
        chosen = torch.zeros_like(pending)
        actions, logits = [], []
        for i in range(self.num_nodes):
            flat, mask = node_views(obs, [i], chosen[:, None], pending[:, None], self.layout)
            logit = self.net.logits(flat[:, 0], mask[:, 0])
            if greedy:
                a = logit.argmax(-1)
            else:
                probs = torch.softmax(logit, -1)
                a = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            chosen = chosen + _slot_onehot(torch.where(a == k, -1, a), k)
            pending = pending - served[:, i]
            actions.append(a)
            logits.append(logit)
        acts, logit_all = torch.stack(actions, 1), torch.stack(logits, 1)
        logp = torch.log_softmax(logit_all, -1).gather(-1, acts[..., None]).squeeze(-1).sum(-1)
        return acts, logp, logit_all

    def teacher_forced_logits(
        self, obs: dict[str, torch.Tensor], actions: torch.Tensor
    ) -> torch.Tensor:
        """Every node's logits ``(B, N, K + 1)`` given the round's ``actions`` ``(B, N)``,
        in one call of the network (node ``i`` sees the actions of nodes ``< i``)."""
        k = self.layout.num_slots
        flat, mask = round_views(obs, actions, self.layout)
        b, n = actions.shape
        return self.net.logits(flat.reshape(b * n, -1), mask.reshape(b * n, -1)).view(b, n, k + 1)

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        actions, _, logits = self.decode(batch[Columns.OBS], greedy=True)
        return {Columns.ACTIONS: actions, Columns.ACTION_DIST_INPUTS: logits.flatten(1)}

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        actions, logp, logits = self.decode(batch[Columns.OBS], greedy=False)
        return {
            Columns.ACTIONS: actions,
            Columns.ACTION_LOGP: logp,
            Columns.ACTION_DIST_INPUTS: logits.flatten(1),
        }

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits = self.teacher_forced_logits(batch[Columns.OBS], batch[Columns.ACTIONS])
        return {Columns.ACTION_DIST_INPUTS: logits.flatten(1)}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        _, pending = _served(obs, self.layout.num_slots)
        flat, _ = node_views(
            obs, [0], torch.zeros_like(pending)[:, None], pending[:, None], self.layout
        )
        return self.net.value(torch.cat([flat[:, 0], obs["queue"]], -1))
