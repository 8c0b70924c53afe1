"""MARA's policy network in plain torch: a permutation-equivariant slot scorer and critic.

The flat observation is reshaped into the node features and ``K`` slot rows.  Each slot
row has *round* features (the task: its progress, deadline, cap, predictor read-out, …),
the same for every node of a decision round, and three *per-node* features: how many
earlier nodes of the round chose it (``nodes_chosen``), how many nodes that served it
still have to choose (``nodes_pending``) and whether this node served it (``is_mine``).

The network is split the way the Multi-Agent Transformer splits encoder and decoder:

* :meth:`MaraNet.encode` reads the round features only: an MLP per slot, then
  self-attention across slots (no positional encoding, so permuting the slots permutes
  the logits).  It runs once per round, whatever the number of nodes.
* :meth:`MaraNet.head` scores every slot for one or more nodes from that encoding plus
  the node's own features, its three per-node slot features and the *autoregressive
  context*: the round's earlier choices pooled into a context vector weighted by
  ``nodes_chosen``.  It is a one-hidden-layer MLP over ``[slot, per-node, node,
  context]`` whose first layer is applied part by part, so a node costs a few small
  operations.  An idle logit is computed from the pooled slots, the node and the
  context; masked actions get :data:`MASKED_LOGIT`.

With ``plan_gap`` (observations from a wrapper whose ``pred_share`` is a planner's
count) the head also reads, per node and slot, how many nodes the plan still wants: its
count less the earlier nodes' choices, and less those and the nodes still to choose
that served the task, in nodes (:data:`PLAN_GAP_LIMIT`).  The round features give the
plan and the per-node features the choices as shares of the task's cap, so a gap of one
node is ``1 / cap`` apart in the inputs; on a 64-node cluster, with caps of 16 to 64, a
network reading the shares alone places a few nodes per round off its planner's
allocation.  The gaps are computed from the observation, exactly for caps up to
``OBS_LIMIT * CAP_SCALE`` (80) nodes, where the ``cap`` feature is clipped.

:meth:`MaraNet.logits` is the node-by-node view (one flat observation per row, as the AEC
env shows it); :mod:`mara_agents.policy.rounds` decodes a whole round with one ``encode``.  The
critic is a separate small network on the global ``state``.  In training it may also read
*privileged* columns that the actor never sees (``privileged``: per slot and of the queue,
:mod:`mara_agents.training.privileged`); :meth:`MaraNet.without_privileged` is the network a
policy file holds, whose critic reads none.

Torch only (no ray): :mod:`mara_agents.policy.inference` runs it from a policy file, and
:mod:`mara_agents.training.rl_module` adapts it to RLlib for training.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mara_agents.policy.features import ADDED_FEATURES
from mara_env.engine import CAP_SCALE, NODE_FEATURES, QUEUE_FEATURES, SLOT_FEATURES

# Very negative but finite: exp() underflows to exactly 0 and 0 * logit stays 0 (no NaN).
MASKED_LOGIT = -1e9
# An empty slot's score in the softmax and max over slots (attention, the critic's pooling):
# far below any real score, so it weighs 0 and never is the max, yet an all-empty row stays
# finite; unlike MASKED_LOGIT it fits in float16 (largest 65504).
EMPTY_SLOT_SCORE = -1e4
MINE_INDEX = SLOT_FEATURES.index("is_mine")  # the slot row's "served it last tick" flag
# The slot features that differ between the nodes of a round, in the order of the
# per-node feature tensors (``(..., K, 3)``) that MaraNet.head reads.
PER_NODE_FEATURES = ("nodes_chosen", "nodes_pending", "is_mine")
# plan_gap: the per-node gaps to the plan's count are clipped to +-PLAN_GAP_LIMIT nodes
# (what a node decides depends on whether the plan wants one more node, not on how many).
PLAN_GAP_LIMIT = 2.0
# The slot row's columns of the cap and of a predictor wrapper's pred_share (after the
# env's features).
CAP_INDEX = SLOT_FEATURES.index("cap")
PLAN_INDEX = len(SLOT_FEATURES) + ADDED_FEATURES.index("pred_share")


class ModelError(ValueError):
    """A model hyper-parameter does not fit the observation layout."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of :class:`MaraNet` (the ``model`` section of an experiment)."""

    hidden: int = 64  # width of slot / node embeddings
    # Width of the slot scorer's hidden layer, which runs once per (node, slot) pair:
    # the bulk of the cost of a PPO update in the round view.
    score_hidden: int = 32
    heads: int = 4  # attention heads
    attention_layers: int = 1  # self-attention blocks across slots
    critic_hidden: int = 64  # width of the critic
    independent: bool = False  # ablation: drop the round's context (nodes chosen / pending)
    value_scale: float = 10.0  # the critic predicts return / value_scale
    work_conserving: bool = False  # idle only when no slot is valid (as uniform share does)
    # Fixed prior added to the logit of the slot a node served in the last tick: a fresh
    # policy then mostly stays (a node that changes task does no work that tick).
    stay_bias: float = 0.0
    # Read the nodes the plan (the wrapper's pred_share) still wants per slot, in nodes
    # (see the module docstring); needs a predictor wrapper's features.
    plan_gap: bool = False


def plan_gap_conflict(config: ModelConfig, has_plan: bool) -> str | None:
    """Why ``config`` cannot be built on observations with (``has_plan``: a predictor
    wrapper's ``pred_share``) or without one, or ``None``: ``plan_gap`` reads that
    column and the round's earlier choices."""
    if config.plan_gap and not has_plan:
        return "model.plan_gap reads the wrapper's pred_share: expected a predictor wrapper"
    if config.plan_gap and config.independent:
        return "model.plan_gap reads the round's choices: expected independent: false"
    return None


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


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, out))


class _SlotAttention(nn.Module):
    """Pre-norm transformer block across slots; empty slots are not attended to."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = _mlp(dim, 2 * dim, dim)

    def forward(self, h: torch.Tensor, key_bias: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The embeddings ``h`` ``(P, H)`` of the slots that ``rows`` ``(B, K)`` marks (in
        row-major order) after the block; ``key_bias`` ``(B, 1, K)`` is added to every
        query's scores.  The slots left out are attended to as zeros, which is exact when
        they are empty slots of a round with an occupied one (weight 0)."""
        h = h + self._attend(self.norm1(h), key_bias, rows)
        return h + self.ff(self.norm2(h))

    def _attend(self, x: torch.Tensor, key_bias: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``self.attn(x, x, x)`` with the additive ``key_bias``, written out: for a few
        dozen slots two batched matmuls cost a fraction of torch's fused CPU kernel."""
        attn = self.attn
        b, k = rows.shape
        qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)
        qkv = qkv.new_zeros(b, k, qkv.shape[-1]).index_put((rows,), qkv)
        q, key, value = qkv.view(b, k, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
        # Additive bias (not a bool mask): an all-empty row stays finite (uniform weights).
        scores = (q @ key.transpose(-1, -2)) * q.shape[-1] ** -0.5 + key_bias[:, None]
        out = (scores.softmax(-1) @ value).transpose(1, 2)[rows]
        return attn.out_proj(out.flatten(1))


def _slot_scores(
    slot: torch.Tensor,
    per_node: torch.Tensor,
    w_per_node: torch.Tensor,
    node: torch.Tensor,
    rounds: torch.Tensor,
    w_out: torch.Tensor,
    b_out: torch.Tensor,
) -> torch.Tensor:
    """The scorer's hidden layer and output for ``P`` (round, slot) pairs and ``M`` nodes:
    ``relu(slot[p] + per_node[p, m] @ w_per_node.T + node[rounds[p], m]) @ w_out.T + b_out``
    ``(P, M)``, from ``slot`` ``(P, S)``, ``per_node`` ``(P, M, 3)``, ``node`` ``(B, M, S)``.

    The hidden layer is built in one ``P x M x S`` buffer (the largest tensor of a PPO
    update) by in-place steps that autograd differentiates."""
    hidden = node.index_select(0, rounds)
    hidden += slot[:, None]
    flat = hidden.view(-1, hidden.shape[-1])
    flat.addmm_(per_node.reshape(-1, per_node.shape[-1]), w_per_node.t())
    return hidden.relu_() @ w_out[0] + b_out


class RoundEncoding(NamedTuple):
    """What :meth:`MaraNet.encode` computes once per round (``B`` rounds, ``K`` slots)."""

    h: torch.Tensor  # (B, K, H) slot embeddings after attention (0 where not embedded)
    score_slot: torch.Tensor  # (P, S) the slot part of the scorer's first layer, per pair
    idle_pooled: torch.Tensor  # (B, H) the pooled-slots part of the idle head's first layer
    rounds: torch.Tensor  # (P,) the round and ...
    slots: torch.Tensor  # (P,) ... the slot of each (round, slot) pair the head scores
    # plan_gap only: per slot, the plan's count and the cap, in nodes ((B, K, 2) or None)
    plan: torch.Tensor | None = None


class MaraNet(nn.Module):
    """Actor (slot logits + idle logit) and centralized critic; plain torch."""

    def __init__(
        self, layout: ObsLayout, config: ModelConfig, privileged: tuple[int, int] = (0, 0)
    ) -> None:
        super().__init__()
        self.layout, self.config = layout, config
        # the critic's privileged columns (per slot, of the queue): training only
        self.privileged = privileged
        h = config.hidden
        per_node = [SLOT_FEATURES.index(f) for f in PER_NODE_FEATURES]
        shared = [i for i in range(layout.slot_dim) if i not in per_node]
        conflict = plan_gap_conflict(config, layout.slot_dim > PLAN_INDEX)
        if conflict:
            raise ModelError(f"{conflict} (slot rows of {layout.slot_dim} features)")
        # index buffers, not parameters: not in the state dict
        self.register_buffer("per_node_cols", torch.tensor(per_node), persistent=False)
        self.register_buffer("shared_cols", torch.tensor(shared), persistent=False)
        self.slot_enc = _mlp(len(shared), h, h)
        self.node_enc = _mlp(layout.node_dim, h, h)
        self.blocks = nn.ModuleList(
            _SlotAttention(h, config.heads) for _ in range(config.attention_layers)
        )
        self.context = nn.Linear(h, h)
        # scorer: relu(W_s slot + W_p per_node + W_n node + W_c context) -> 1
        s = config.score_hidden
        self.score_slot = nn.Linear(h, s)
        self.score_per_node = nn.Linear(len(per_node) + 2 * config.plan_gap, s, bias=False)
        self.score_node = nn.Linear(h, s, bias=False)
        self.score_context = nn.Linear(h, s, bias=False)
        self.score_out = nn.Linear(s, 1)
        # idle: relu(W_p pooled + W_n node + W_c context) -> 1
        self.idle_pooled = nn.Linear(h, h)
        self.idle_node = nn.Linear(h, h, bias=False)
        self.idle_context = nn.Linear(h, h, bias=False)
        self.idle_out = nn.Linear(h, 1)
        c = config.critic_hidden
        slot_extra, queue_extra = privileged
        self.critic_slot = _mlp(layout.slot_dim + slot_extra, c, c)
        self.critic_head = _mlp(layout.node_dim + layout.state_extra + 2 * c + queue_extra, c, 1)

    def critic_parameters(self) -> list[nn.Parameter]:
        """The centralized critic's parameters (every other one is the actor's)."""
        return [*self.critic_slot.parameters(), *self.critic_head.parameters()]

    def _split(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.layout
        node = flat[..., : lay.node_dim]
        slots = flat[..., lay.node_dim : lay.obs_dim].reshape(
            *flat.shape[:-1], lay.num_slots, lay.slot_dim
        )
        return node, slots

    def encode(
        self,
        slots: torch.Tensor,
        mask: torch.Tensor | None = None,
        reads: torch.Tensor | bool = True,
    ) -> RoundEncoding:
        """The round part of the actor from slot rows ``(B, K, S)``; their per-node
        columns (:data:`PER_NODE_FEATURES`) are not read.  With the round's ``mask``
        (``(..., K + 1)``) only the leading slots in use are encoded: one past the last
        slot that is occupied or valid anywhere in the batch.  The env fills slots from
        the first, so the rest are empty and masked (their logits are masked anyway, and
        attention gives empty slots zero weight).

        ``reads``: the empty slots whose embedding the caller reads besides the valid
        ones (through earlier nodes' choices of them): all (``True``), none (``False``:
        per-node features that count valid choices only, as decoding gives), or a
        ``(B, K)`` mask.  The others are not embedded (``h`` is 0 there; their logits
        are masked): attention gives them no weight, so what is read is unchanged."""
        occupied = slots[..., self.layout.occupied_index] > 0.5
        if mask is not None:
            used = (occupied | (mask[..., :-1] > 0)).reshape(-1, occupied.shape[-1])
            last = used.any(0).nonzero()
            width = int(last[-1]) + 1 if len(last) else 1
            slots, occupied = slots[:, :width], occupied[:, :width]
        plan = None
        if self.config.plan_gap:  # in nodes: share * cap, and cap (both whole numbers)
            cap = slots[..., CAP_INDEX] * CAP_SCALE
            plan = torch.stack([slots[..., PLAN_INDEX] * cap, cap], -1).round()
        if isinstance(reads, bool):
            rows = torch.full_like(occupied, reads)
        else:
            rows = reads[:, : occupied.shape[1]].clone()
        # a round without a task attends to every slot (uniform weights): all embedded
        rows |= occupied | ~occupied.any(-1, keepdim=True)
        if mask is not None:
            rows |= mask[:, : occupied.shape[1]] > 0
        h = self.slot_enc(slots.index_select(-1, self.shared_cols)[rows])
        key_bias = torch.where(occupied, 0.0, EMPTY_SLOT_SCORE)[:, None, :]
        for block in self.blocks:
            h = block(h, key_bias, rows)
        h = h.new_zeros(*rows.shape, h.shape[-1]).index_put((rows,), h)
        occ = occupied.to(h.dtype)[..., None]
        pooled = (occ * h).sum(-2) / (occ.sum(-2) + 1e-6)
        # the head scores only the slots the mask allows: the rest are masked anyway
        scored = torch.ones_like(occupied) if mask is None else mask[:, : rows.shape[1]] > 0
        rounds, slots = scored.nonzero(as_tuple=True)
        score_slot = self.score_slot(h[rounds, slots])
        return RoundEncoding(h, score_slot, self.idle_pooled(pooled), rounds, slots, plan)

    def _added_columns(self) -> dict[str, int]:
        """The input columns this network's first layers add at their end to those of the
        same network without ``plan_gap`` and without privileged columns, by weight."""
        slot_extra, queue_extra = self.privileged
        return {
            "score_per_node.weight": 2 * self.config.plan_gap,
            "critic_slot.0.weight": slot_extra,
            "critic_head.0.weight": queue_extra,
        }

    def warm_start(self, state: dict[str, torch.Tensor]) -> None:
        """Load ``state``, a state dict of this architecture or of the same one without
        ``plan_gap`` or without the critic's privileged columns: their weights then start
        at 0, so the network acts and values as the source did until it is trained."""
        state, own = dict(state), self.state_dict()
        for key, added in self._added_columns().items():
            theirs = state.get(key)
            if added and theirs is not None and theirs.shape[1] == own[key].shape[1] - added:
                state[key] = torch.cat([theirs, theirs.new_zeros(len(theirs), added)], 1)
        self.load_state_dict(state)

    def without_privileged(self) -> MaraNet:
        """This network without the critic's privileged columns (what a policy file
        holds): the actor unchanged, the critic's weights of those columns dropped, so it
        reads only the ``state`` (its values are then not a fitted critic's: a run that
        starts from it fits its critic in the warm-up)."""
        net = MaraNet(self.layout, self.config)
        state = self.state_dict()
        for key, added in self._added_columns().items():
            if added and key.startswith("critic"):
                state[key] = state[key][:, :-added]
        net.load_state_dict(state)
        return net

    def encode_nodes(self, node: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Node rows ``(B, M, node_dim)`` as the scorer's and idle head's node terms."""
        n = self.node_enc(node)
        return self.score_node(n), self.idle_node(n)

    def head(
        self,
        enc: RoundEncoding,
        nodes: tuple[torch.Tensor, torch.Tensor],
        per_node: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Masked logits ``(B, M, K + 1)`` of ``M`` nodes of each round: ``nodes`` from
        :meth:`encode_nodes`, ``per_node`` ``(B, M, K, 3)`` their
        :data:`PER_NODE_FEATURES`, ``mask`` ``(B, M, K + 1)`` (within the round's mask
        that :meth:`encode` read).  Slots beyond the encoding's width, or that the
        round's mask rules out, get :data:`MASKED_LOGIT`."""
        score_node, idle_node = nodes
        width = enc.h.shape[1]
        per_node = per_node[..., :width, :]
        if self.config.independent:  # no view of the round's other choices
            per_node = torch.cat([torch.zeros_like(per_node[..., :2]), per_node[..., 2:]], -1)
            score_ctx = idle_ctx = 0.0
        else:
            w = per_node[..., 0].clamp(min=0.0)  # nodes_chosen
            pooled = torch.bmm(w, enc.h) / (w.sum(-1, keepdim=True) + 1e-6)
            ctx = self.context(pooled)
            score_ctx, idle_ctx = self.score_context(ctx), self.idle_context(ctx)
        if enc.plan is not None:
            per_node = torch.cat([per_node, self._plan_gaps(enc.plan, per_node)], -1)
        rows, slots = enc.rounds, enc.slots
        inputs = (enc.score_slot, per_node[rows, :, slots], self.score_per_node.weight)
        inputs += (score_node + score_ctx, rows)
        scores = _slot_scores(*inputs, self.score_out.weight, self.score_out.bias)
        # one (B, M, K + 1) tensor: the scored slots, the idle logit last, masked elsewhere
        k = self.layout.num_slots
        out = scores.new_full((*per_node.shape[:-2], k + 1), MASKED_LOGIT)
        out[rows, :, slots] = scores
        if self.config.stay_bias:
            out[..., :width] += self.config.stay_bias * per_node[..., 2]
        idle = self.idle_out(torch.relu(enc.idle_pooled[:, None] + idle_node + idle_ctx))
        out[..., k:] = idle
        valid = mask > 0
        if self.config.work_conserving:
            valid = torch.cat([valid[..., :-1], ~valid[..., :-1].any(-1, keepdim=True)], -1)
        return out.masked_fill(~valid, MASKED_LOGIT)

    @staticmethod
    def _plan_gaps(plan: torch.Tensor, per_node: torch.Tensor) -> torch.Tensor:
        """The gaps ``(B, M, K, 2)`` to the plan (:attr:`RoundEncoding.plan`) of nodes with
        ``per_node`` features ``(B, M, K, 3)``: its count less the earlier choices, and
        less those and the nodes still to choose that served the slot, clipped."""
        count, cap = plan[:, None, : per_node.shape[2]].unbind(-1)
        chosen, pending = ((per_node[..., i] * cap).round() for i in (0, 1))
        left = count - chosen
        return torch.stack([left, left - pending], -1).clamp(-PLAN_GAP_LIMIT, PLAN_GAP_LIMIT)

    def logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked logits ``(B, K + 1)`` (last = idle) for flat observations ``(B, D)``."""
        node, slots = self._split(obs)
        per_node = slots.index_select(-1, self.per_node_cols)
        enc = self.encode(slots, mask)
        return self.head(enc, self.encode_nodes(node[:, None]), per_node[:, None], mask[:, None])[
            :, 0
        ]

    def value(
        self,
        state: torch.Tensor,
        privileged: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Value ``(B,)`` of global states ``(B, D + 4)``: expected remaining team return;
        ``privileged``: the critic's privileged columns ``(B, K, P)`` and ``(B, Q)``, which
        a network built with them needs."""
        lay = self.layout
        node, slots = self._split(state)
        extra: list[torch.Tensor] = []
        if self.privileged != (0, 0):
            if privileged is None:
                raise ModelError(
                    f"the critic reads {self.privileged} privileged columns (per slot, queue); "
                    "expected them with the state"
                )
            slots = torch.cat([slots, privileged[0]], -1)
            extra = [privileged[1]]
        occupied = slots[..., lay.occupied_index] > 0.5
        occ = occupied.float()[..., None]
        # only the occupied slots are embedded: both pools give the others no weight
        e = self.critic_slot(slots[occupied])
        e = e.new_zeros(*occupied.shape, e.shape[-1]).index_put((occupied,), e)
        mean = (occ * e).sum(-2) / (occ.sum(-2) + 1e-6)
        mx = torch.where(occ > 0, e, torch.full_like(e, EMPTY_SLOT_SCORE)).amax(-2).clamp(min=-1.0)
        x = torch.cat([node, state[..., lay.obs_dim :], mean, mx, *extra], -1)
        return self.critic_head(x).squeeze(-1) * self.config.value_scale

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits(obs, mask)


def model_config_from(values: dict[str, Any] | None) -> ModelConfig:
    """:class:`ModelConfig` from a dict, ignoring RLlib's own default keys."""
    names = {f.name for f in fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in (values or {}).items() if k in names})
