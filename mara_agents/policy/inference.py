"""Acting with a loaded policy (torch, no ray): one observation, or a whole round.

:func:`load_policy` reads a policy file (:mod:`mara_agents.policy.policy_file`) and
returns a :class:`MaraPolicy`: ``act(obs)`` for one node's observation dict (the AEC env's),
``act_round(obs)`` for a round observation (:class:`~mara_env.round_env.RoundEnv`'s),
decoded by :func:`mara_agents.policy.rounds.decode`.  :func:`slots_for` sizes the slots of
a cluster the policy was not trained on.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mara_agents.policy.features import FeatureSettings
from mara_agents.policy.network import MaraNet
from mara_agents.policy.policy_file import (
    SHIPPED_POLICY,
    build_network,
    feature_settings_of,
    read_policy,
    trained_nodes,
)
from mara_agents.policy.rounds import decode, greedy_fixed_point


class MaraPolicy:
    """A loaded policy: ``act(obs) -> action`` for one node's observation dict."""

    def __init__(
        self,
        net: MaraNet,
        meta: dict[str, Any],
        seed: int | None = None,
        features: FeatureSettings | None = None,
    ) -> None:
        self.net = net.eval()
        self.meta = meta
        self.features = features  # how its predictor features are computed (None: no wrapper)
        self.generator = torch.Generator().manual_seed(0 if seed is None else seed)

    @property
    def wrapper(self) -> str:
        return self.meta.get("wrapper", "none")

    @property
    def trained_nodes(self) -> int:
        """The cluster size N the policy was trained on (the env default where unrecorded)."""
        return trained_nodes(self.meta)

    def slots_for(self, num_nodes: int) -> int:
        """The slot count to observe a cluster of ``num_nodes`` with (:func:`slots_for`)."""
        return slots_for(self.net.layout.num_slots, self.trained_nodes, num_nodes)

    def with_slots(self, num_slots: int) -> MaraPolicy:
        """The same weights observing ``num_slots`` slots (this policy if it has as many):
        no weight of :class:`MaraNet` depends on the slot count."""
        if num_slots == self.net.layout.num_slots:
            return self
        net = MaraNet(replace(self.net.layout, num_slots=num_slots), self.net.config)
        net.load_state_dict(self.net.state_dict())
        return MaraPolicy(net, self.meta, features=self.features)

    def seed(self, seed: int) -> None:
        """Reseed the sampling generator (only used with ``greedy=False``)."""
        self.generator.manual_seed(seed)

    def logits(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Masked logits ``(K + 1,)`` of one observation dict (``net.logits`` as numpy)."""
        x = np.asarray(obs["observation"], np.float32)
        lay = self.net.layout
        if x.shape != (lay.obs_dim,):
            raise ValueError(
                f"observation has shape {x.shape}; this policy expects ({lay.obs_dim},) "
                f"({lay.node_dim} node features + {lay.num_slots} slots x {lay.slot_dim}, "
                f"wrapper={self.wrapper!r}): build the env with num_slots={lay.num_slots}"
            )
        mask = np.asarray(obs["action_mask"])
        with torch.inference_mode():
            out = self.net.logits(torch.from_numpy(x)[None], torch.from_numpy(mask)[None])
        return out[0].numpy()

    def act_round(self, obs: dict[str, np.ndarray], greedy: bool = True) -> np.ndarray:
        """The ``N`` node actions of one round observation of
        :class:`~mara_env.round_env.RoundEnv` (:func:`~mara_agents.policy.rounds.decode`:
        node after node, each given the earlier ones; greedy, the actions :meth:`act`
        would give node by node in the AEC env)."""
        batch = {k: torch.from_numpy(np.asarray(v))[None] for k, v in obs.items()}
        with torch.inference_mode():
            if greedy:  # decode's greedy decoder, without the log-probability
                actions = greedy_fixed_point(self.net, batch)[0]
            else:
                actions = decode(self.net, batch, greedy, self.generator)[0]
        return actions[0].numpy()

    def act(self, obs: dict[str, np.ndarray], greedy: bool = True) -> int:
        """Action for one observation: argmax (default) or a sample from the seeded generator."""
        logits = self.logits(obs)
        if greedy:
            return int(logits.argmax())
        probs = torch.softmax(torch.from_numpy(logits), -1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def load_policy(path: str | Path = SHIPPED_POLICY, seed: int | None = None) -> MaraPolicy:
    """Load a policy file written by ``mara export`` (default: the shipped one)."""
    data = read_policy(path)
    net = build_network(path, data)
    features = feature_settings_of(path, data)
    meta = {k: v for k, v in data.items() if k != "state_dict"}
    return MaraPolicy(net, meta, seed, features)


def slots_for(trained_slots: int, trained_nodes: int, num_nodes: int) -> int:
    """Slots for a cluster of ``num_nodes``: the trained count, or as many per node as in
    training where that is more (``max(K, ceil(K * N / N_trained))``).

    A node sees only the ``K`` earliest-deadline tasks, so at a fixed ``K`` a big cluster
    hides most of the tasks that uniform share and flow_share serve; the trained ratio
    keeps ``K >= N`` (so the wrapper's ``pred_share`` is flow_share's count, which needs
    every task that gets a node visible) and keeps the features divided by ``K``
    (``active_tasks``, ``queued_tasks``, ``queue_count``) on the scale of training."""
    return max(trained_slots, math.ceil(trained_slots * num_nodes / trained_nodes))
