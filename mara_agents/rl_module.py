"""MARA's policy as an RLlib module: :class:`~mara_agents.network.MaraNet` on the new API stack.

One module (id :data:`SHARED_MODULE_ID`) serves every node (parameter sharing); PPO
trains its actor and centralized critic.  The network itself is plain torch in
:mod:`mara_agents.network`, so acting from a policy file needs no ray.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from mara_agents.network import MaraNet, ObsLayout, model_config_from

SHARED_MODULE_ID = "shared"


class MaraRLModule(TorchRLModule, ValueFunctionAPI):
    """RLlib (new API stack) wrapper of :class:`MaraNet` for PPO.

    ``model_config`` holds :class:`~mara_agents.network.ModelConfig` fields and optionally
    ``init_weights``: a path to a ``MaraNet`` state dict (e.g. from behaviour cloning)
    loaded at setup.
    """

    def setup(self) -> None:
        space = self.observation_space
        self.layout = ObsLayout.infer(
            space["observation"].shape[0], space["state"].shape[0], int(self.action_space.n)
        )
        self.net = MaraNet(self.layout, model_config_from(self.model_config))
        init = (self.model_config or {}).get("init_weights")
        if init:
            self.net.load_state_dict(torch.load(init, map_location="cpu", weights_only=True))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        return {Columns.ACTION_DIST_INPUTS: self.net.logits(obs["observation"], obs["action_mask"])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.net.value(batch[Columns.OBS]["state"])
