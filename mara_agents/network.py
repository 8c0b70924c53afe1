"""MARA's policy network in plain torch: a permutation-equivariant slot scorer and critic.

The flat observation is reshaped into the node features and ``K`` slot rows; each slot
row is encoded by an MLP, slots attend to each other (self-attention, no positional
encoding, so permuting the slots permutes the logits), and every slot is scored together
with the node context and the *autoregressive context*: the round's earlier choices,
present in each slot's ``nodes_chosen`` feature and pooled into a context vector weighted
by those choices.  An idle logit is computed from the pooled slots and the node context;
masked actions get :data:`MASKED_LOGIT`.  The critic is a separate small network on the
global ``state``.

Torch only (no ray): :mod:`mara_agents.policy` runs it from a policy file, and
:mod:`mara_agents.rl_module` adapts it to RLlib for training.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn

from mara_env.cluster_env import NODE_FEATURES, QUEUE_FEATURES, SLOT_FEATURES

# Very negative but finite: exp() underflows to exactly 0 and 0 * logit stays 0 (no NaN).
MASKED_LOGIT = -1e9
MINE_INDEX = SLOT_FEATURES.index("is_mine")  # the slot row's "served it last tick" flag


class ModelError(ValueError):
    """A model hyper-parameter does not fit the observation layout."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of :class:`MaraNet` (the ``model`` section of an experiment)."""

    hidden: int = 64  # width of slot / node embeddings
    heads: int = 4  # attention heads
    attention_layers: int = 1  # self-attention blocks across slots
    critic_hidden: int = 64  # width of the critic
    independent: bool = False  # ablation: drop the round's context (nodes chosen / pending)
    value_scale: float = 10.0  # the critic predicts return / value_scale
    work_conserving: bool = False  # idle only when no slot is valid (as uniform share does)
    # Fixed prior added to the logit of the slot a node served in the last tick: a fresh
    # policy then mostly stays (a node that changes task does no work that tick).
    stay_bias: float = 0.0


@dataclass(frozen=True)
class ObsLayout:
    """How a flat observation splits: node features, then ``num_slots`` rows of slot features."""

    node_dim: int
    slot_dim: int
    num_slots: int
    state_extra: int  # features of ``state`` after the observation (queue summary)
    chosen_index: int = SLOT_FEATURES.index("nodes_chosen")
    pending_index: int = SLOT_FEATURES.index("nodes_pending")
    occupied_index: int = SLOT_FEATURES.index("occupied")

    @property
    def obs_dim(self) -> int:
        return self.node_dim + self.num_slots * self.slot_dim

    @classmethod
    def infer(cls, obs_dim: int, state_dim: int, num_actions: int) -> ObsLayout:
        """Layout from space sizes; works with and without per-slot predictor features."""
        k = num_actions - 1
        node_dim = len(NODE_FEATURES)
        if k < 1 or (obs_dim - node_dim) % k or (obs_dim - node_dim) // k < len(SLOT_FEATURES):
            raise ModelError(
                f"observation of size {obs_dim} does not split into {node_dim} node features "
                f"and {k} slots of >= {len(SLOT_FEATURES)} features"
            )
        layout = cls(node_dim, (obs_dim - node_dim) // k, k, state_dim - obs_dim)
        if layout.state_extra != len(QUEUE_FEATURES):
            raise ModelError(
                f"state of size {state_dim}: expected observation ({obs_dim}) + "
                f"{len(QUEUE_FEATURES)} queue features"
            )
        return layout

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ObsLayout:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, out))


class _SlotAttention(nn.Module):
    """Pre-norm transformer block across slots; empty slots are not attended to."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = _mlp(dim, 2 * dim, dim)

    def forward(self, h: torch.Tensor, key_bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(h)
        # Additive bias (not a bool mask): an all-empty row stays finite (uniform weights).
        bias = key_bias.repeat_interleave(self.attn.num_heads, 0)
        h = h + self.attn(x, x, x, attn_mask=bias, need_weights=False)[0]
        return h + self.ff(self.norm2(h))


class MaraNet(nn.Module):
    """Actor (slot logits + idle logit) and centralized critic; plain torch."""

    def __init__(self, layout: ObsLayout, config: ModelConfig) -> None:
        super().__init__()
        self.layout, self.config = layout, config
        h = config.hidden
        self.slot_enc = _mlp(layout.slot_dim, h, h)
        self.node_enc = _mlp(layout.node_dim, h, h)
        self.blocks = nn.ModuleList(
            _SlotAttention(h, config.heads) for _ in range(config.attention_layers)
        )
        self.context = nn.Linear(h, h)
        self.score = _mlp(3 * h, h, 1)
        self.idle = _mlp(3 * h, h, 1)
        c = config.critic_hidden
        self.critic_slot = _mlp(layout.slot_dim, c, c)
        self.critic_head = _mlp(layout.node_dim + layout.state_extra + 2 * c, c, 1)

    def _split(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.layout
        node = flat[..., : lay.node_dim]
        slots = flat[..., lay.node_dim : lay.obs_dim].reshape(
            *flat.shape[:-1], lay.num_slots, lay.slot_dim
        )
        return node, slots

    def logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked logits ``(B, K + 1)`` (last = idle) for flat observations ``(B, D)``."""
        lay = self.layout
        node, slots = self._split(obs)
        chosen = slots[..., lay.chosen_index]
        if self.config.independent:
            slots = slots.clone()
            slots[..., [lay.chosen_index, lay.pending_index]] = 0.0
        occupied = slots[..., lay.occupied_index] > 0.5
        h = self.slot_enc(slots)
        key_bias = torch.where(occupied, 0.0, -1e4)[:, None, :].expand(-1, lay.num_slots, -1)
        for block in self.blocks:
            h = block(h, key_bias)
        n = self.node_enc(node)
        if self.config.independent:
            ctx = torch.zeros_like(n)
        else:
            w = chosen.clamp(min=0.0)
            ctx = self.context((w[..., None] * h).sum(-2) / (w.sum(-1, keepdim=True) + 1e-6))
        occ = occupied.float()[..., None]
        pooled = (occ * h).sum(-2) / (occ.sum(-2) + 1e-6)
        k = lay.num_slots
        slot_logits = self.score(
            torch.cat([h, n[:, None, :].expand(-1, k, -1), ctx[:, None, :].expand(-1, k, -1)], -1)
        ).squeeze(-1)
        if self.config.stay_bias:
            slot_logits = slot_logits + self.config.stay_bias * slots[..., MINE_INDEX]
        idle_logit = self.idle(torch.cat([pooled, n, ctx], -1))
        out = torch.cat([slot_logits, idle_logit], -1)
        valid = mask > 0
        if self.config.work_conserving:
            valid = valid.clone()
            valid[:, -1] = ~valid[:, :-1].any(-1)
        return torch.where(valid, out, torch.full_like(out, MASKED_LOGIT))

    def value(self, state: torch.Tensor) -> torch.Tensor:
        """Value ``(B,)`` of global states ``(B, D + 4)``: expected remaining team return."""
        lay = self.layout
        node, slots = self._split(state)
        occ = (slots[..., lay.occupied_index] > 0.5).float()[..., None]
        e = self.critic_slot(slots)
        mean = (occ * e).sum(-2) / (occ.sum(-2) + 1e-6)
        mx = torch.where(occ > 0, e, torch.full_like(e, -1e4)).amax(-2).clamp(min=-1.0)
        x = torch.cat([node, state[..., lay.obs_dim :], mean, mx], -1)
        return self.critic_head(x).squeeze(-1) * self.config.value_scale

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits(obs, mask)


def model_config_from(values: dict[str, Any] | None) -> ModelConfig:
    """:class:`ModelConfig` from a dict, ignoring RLlib's own default keys."""
    names = {f.name for f in fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in (values or {}).items() if k in names})
