"""A :class:`~mara_agents.policy.network.MaraNet` acting on whole decision rounds (torch, no ray).

A round observation is what :class:`mara_env.round_env.RoundEnv` returns: the node rows,
the slot rows before anyone chose, the queue, the slot each node served in the last tick
(``node_slot``), the slots' caps and node 0's mask, each with a leading batch axis.  From
it this module rebuilds what the AEC env shows node ``i`` once nodes ``< i`` have chosen
(the mapping is documented on ``RoundEnv``; a test checks it against ``observe`` at every
node) and runs the network on it:

* :func:`decode`: the nodes' actions one after another, each given the earlier ones (the
  Multi-Agent Transformer's decoder), with one :meth:`MaraNet.encode` per round: greedy
  by :func:`greedy_fixed_point` (the one greedy decoder), sampled node after node;
* :func:`teacher_forced_logits`: every node's logits given the round's actions, in one
  batched call (what PPO trains on);
* :func:`round_value`: the centralized critic, once per round.

Every one of them reads the per-node features from :func:`per_node_features`, which
computes them by the env's own rule (:mod:`mara_env.node_view`) on torch tensors.
:class:`mara_agents.training.rl_module.MaraRoundModule` trains through these;
:meth:`mara_agents.policy.inference.MaraPolicy.act_round` (what the evaluation harness acts
with) decodes through :func:`decode`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from mara_agents.policy.network import MINE_INDEX, MaraNet, ObsLayout, RoundEncoding
from mara_env import node_view

Obs = dict[str, torch.Tensor]
# Nodes scored per pass of the greedy decoder: a pass costs WINDOW x K whatever N is.  At
# N = 16 one window covers the round (a pass per wave of changes, as whole-round Jacobi).
WINDOW = 16


def _slot_onehot(slot: torch.Tensor, k: int) -> torch.Tensor:
    """One-hot ``(..., K)`` (int64) of slot indices; ``-1`` (none) is an all-zero row."""
    return (slot[..., None] == torch.arange(k, device=slot.device)).long()


def served(obs: Obs, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-node one-hots of the slot each node served ``(B, N, K)`` and their sum ``(B, K)``."""
    one_hot = _slot_onehot(obs["node_slot"].long(), k)
    return one_hot, one_hot.sum(1)


def inverse_caps(obs: Obs) -> torch.Tensor:
    """``1 / max(cap, 1)`` ``(B, 1, K)`` in float64, as the engine scales counts."""
    return node_view.inverse_caps(torch, obs["slot_cap"])[:, None, :]


def per_node_features(
    obs: Obs,
    mine: torch.Tensor,
    chosen: torch.Tensor,
    pending: torch.Tensor,
    inv: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-node slot features ``(B, M, K, 3)`` (``nodes_chosen``, ``nodes_pending``,
    ``is_mine``) and masks ``(B, M, K + 1)`` of ``M`` nodes, given per node the one-hot of
    the slot it served (``mine``, rows of :func:`served`) and the slot counts ``(B, M, K)``
    of earlier nodes' choices (``chosen``) and of nodes still to choose that served each
    slot in the last tick (``pending``); ``inv``: :func:`inverse_caps`."""
    inv = inverse_caps(obs) if inv is None else inv
    slot_cap = obs["slot_cap"][:, None]
    nodes_chosen, nodes_pending, room = node_view.slot_view(chosen, pending, inv, slot_cap)
    # in float64 as the engine, then float32 as its observations (0 and 1 are exact)
    feats = torch.stack([nodes_chosen, nodes_pending, mine.to(inv.dtype)], -1).float()
    full = F.pad(~room, (0, 1))  # idle (the last action) is never masked
    mask = obs["action_mask"][:, None].expand(-1, feats.shape[1], -1).masked_fill(full, 0)
    return feats, mask


class RoundContext(NamedTuple):
    """What every node's view of a round shares, whatever the actions: the slot each node
    served (one-hot), the counts of nodes still to choose that served each slot, and the
    engine's count scale (:func:`inverse_caps`)."""

    one_hot: torch.Tensor  # (B, N, K)
    pending: torch.Tensor  # (B, N, K)
    inv: torch.Tensor  # (B, 1, K)


def round_context(obs: Obs, k: int) -> RoundContext:
    """The :class:`RoundContext` of a round observation."""
    one_hot, start = served(obs, k)
    pending = start[:, None] - (one_hot.cumsum(1) - one_hot)
    return RoundContext(one_hot, pending, inverse_caps(obs))


def round_features(
    obs: Obs, actions: torch.Tensor, k: int, context: RoundContext | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`per_node_features` of every node given the round's (valid) ``actions``
    ``(B, N)``: node ``i`` sees the actions of nodes ``< i`` (``context``: the round's
    :func:`round_context`, computed here if not given)."""
    ctx = round_context(obs, k) if context is None else context
    taken = F.one_hot(actions.long(), k + 1)[..., :k]  # idle (K) counts for no slot
    chosen = taken.cumsum(1) - taken  # choices of earlier nodes
    return per_node_features(obs, ctx.one_hot, chosen, ctx.pending, ctx.inv)


def flat_views(obs: Obs, per_node: torch.Tensor, layout: ObsLayout) -> torch.Tensor:
    """The flat observations ``(B, M, D)`` the AEC env shows the nodes of ``per_node``
    (all N nodes, in order): node row, then the slot rows with the per-node columns set."""
    b, m, k, _ = per_node.shape
    slots = obs["slots"][:, None].expand(b, m, k, layout.slot_dim).clone()
    cols = [layout.chosen_index, layout.pending_index, MINE_INDEX]
    slots[..., cols] = per_node
    return torch.cat([obs["nodes"][:, :m], slots.flatten(-2)], -1)


def decode(
    net: MaraNet, obs: Obs, greedy: bool, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Actions ``(B, N)``, their summed log-prob ``(B,)`` and the logits ``(B, N, K + 1)``:
    node after node, each given the earlier nodes' actions (greedy: by
    :func:`greedy_fixed_point`, which gives those actions in a few batched passes;
    sampled: by :func:`_sample_in_turn`, from ``generator``)."""
    if greedy:
        acts, logit_all = greedy_fixed_point(net, obs)
    else:
        acts, logit_all = _sample_in_turn(net, obs, generator)
    logp = torch.log_softmax(logit_all, -1).gather(-1, acts[..., None]).squeeze(-1).sum(-1)
    return acts, logp, logit_all


def greedy_fixed_point(
    net: MaraNet, obs: Obs, window: int = WINDOW
) -> tuple[torch.Tensor, torch.Tensor]:
    """The greedy actions ``(B, N)`` of a round and their logits ``(B, N, K + 1)``, found as
    the fixed point of teacher forcing on a guess (Jacobi decoding), ``window`` nodes at a
    time.

    Start from :func:`first_guess` (the plan's placement, else every node staying).  Any
    start gives the same actions; a good one saves passes.  A pass scores
    the window of nodes after the settled ones, given the settled nodes' actions and the
    guess for the window's earlier nodes (one call of the head); the argmax is the next
    guess.  The window's nodes up to its first changed action (in any round of the batch)
    are then settled: each was scored given the settled actions before it, so its action
    is the argmax given the earlier nodes' actions, which is what decoding node after
    node gives.  Nodes mostly stay, so a window takes a few passes; the window bounds a
    pass's cost on big clusters, where a change early in the round would otherwise make
    every pass rescore all ``N`` nodes.
    """
    k = net.layout.num_slots
    enc = net.encode(obs["slots"], obs["action_mask"], reads=False)  # valid choices only
    score_node, idle_node = net.encode_nodes(obs["nodes"])
    acts = first_guess(obs, enc, k)
    ctx = round_context(obs, k)
    b, n = acts.shape
    logits = enc.h.new_empty(b, n, k + 1)
    before = torch.zeros_like(ctx.pending[:, 0])  # per slot: chosen by the settled nodes
    done = 0
    while done < n:
        run = slice(done, min(done + window, n))
        taken = F.one_hot(acts[:, run], k + 1)[..., :k]  # idle (K) counts for no slot
        chosen = before[:, None] + taken.cumsum(1) - taken
        feats, mask = per_node_features(
            obs, ctx.one_hot[:, run], chosen, ctx.pending[:, run], ctx.inv
        )
        out = net.head(enc, (score_node[:, run], idle_node[:, run]), feats, mask)
        new = out.argmax(-1)
        changed = (new != acts[:, run]).any(0).nonzero()
        settled = new.shape[1] if not len(changed) else int(changed[0]) + 1
        acts[:, run], logits[:, run] = new, out
        before += F.one_hot(new[:, :settled], k + 1)[..., :k].sum(1)
        done += settled
    return acts, logits


def first_guess(obs: Obs, enc: RoundEncoding, k: int) -> torch.Tensor:
    """A guess ``(B, N)`` at a round's greedy actions, where :func:`greedy_fixed_point`
    starts: with the plan's counts (``plan_gap``: :attr:`RoundEncoding.plan`), the nodes
    placed as :func:`mara_env.schedulers.place` places a plan (in slot order): a node
    stays while its slot's count has room for it after the earlier nodes that served the
    slot, and the others, in node order, fill the room left slot by slot (idle when none
    is left); without a plan, every node stays on the slot it served (idle if none).  A
    policy that follows its plan then settles a round in one pass (1.06 passes a round for
    ``mara_v18`` at load 2, against 2.37 from staying)."""
    slot = obs["node_slot"].long()
    stay = torch.where(slot >= 0, slot, k)
    if enc.plan is None:
        return stay
    count = enc.plan[..., 0].long()  # (B, W): the encoded slots only
    width = count.shape[1]
    one_hot = _slot_onehot(slot, width)  # a slot beyond the width has no count: the node moves
    earlier = one_hot.cumsum(1) - one_hot  # nodes before each that served the same slot
    stays = (one_hot * (earlier < count[:, None])).sum(-1) > 0
    room = (count - (one_hot * stays[..., None]).sum(1)).clamp(min=0)
    mover = (~stays).long().cumsum(1) - 1  # each moving node's place among the movers
    target = torch.searchsorted(room.cumsum(-1), mover, right=True)
    return torch.where(stays, slot, torch.where(target < width, target, k))


def _sample_in_turn(
    net: MaraNet, obs: Obs, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled actions ``(B, N)`` and their logits ``(B, N, K + 1)``, one node at a time
    (each node's sample needs the earlier nodes')."""
    k = net.layout.num_slots
    n = obs["nodes"].shape[1]
    enc = net.encode(obs["slots"], obs["action_mask"], reads=False)  # valid choices only
    node_terms = net.encode_nodes(obs["nodes"])
    one_hot, pending = served(obs, k)
    # the counts of earlier choices per slot, and of idle in a last column (not read)
    chosen = pending.new_zeros(len(pending), k + 1)
    inv = inverse_caps(obs)
    # Gumbel-max: argmax(logits + G) is a sample of softmax(logits)
    u = torch.rand((*one_hot.shape[:2], k + 1), generator=generator, device=one_hot.device)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-20)))
    # each node's slices, taken once: (B, 1, ...) views
    mines, score_nodes, idle_nodes = (x.split(1, dim=1) for x in (one_hot, *node_terms))
    ones = chosen.new_ones(len(chosen), 1)
    actions, logits = [], []
    for i in range(n):
        counts = chosen[:, None, :k]
        feats, mask = per_node_features(obs, mines[i], counts, pending[:, None], inv)
        logit = net.head(enc, (score_nodes[i], idle_nodes[i]), feats, mask)[:, 0]
        a = (logit + gumbel[:, i]).argmax(-1)
        chosen = chosen.scatter_add(1, a[:, None], ones)
        pending = pending - mines[i][:, 0]
        actions.append(a)
        logits.append(logit)
    return torch.stack(actions, 1), torch.stack(logits, 1)


def teacher_forced_logits(net: MaraNet, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
    """Every node's logits ``(B, N, K + 1)`` given the round's ``actions`` ``(B, N)``, in
    one call of the head (node ``i`` sees the actions of nodes ``< i``)."""
    feats, mask = round_features(obs, actions, net.layout.num_slots)
    chosen = (feats[..., 0] > 0).any(1)  # the slots earlier nodes' choices make read
    enc = net.encode(obs["slots"], obs["action_mask"], reads=chosen)
    return net.head(enc, net.encode_nodes(obs["nodes"]), feats, mask)


def round_value(
    net: MaraNet, obs: Obs, privileged: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """The critic's value ``(B,)`` of each round: the global state before anyone chose
    (and the critic's ``privileged`` columns, where it reads some)."""
    one_hot, pending = served(obs, net.layout.num_slots)
    zero = torch.zeros_like(pending)[:, None]
    feats, _ = per_node_features(obs, one_hot[:, :1], zero, pending[:, None])
    flat = flat_views(obs, feats, net.layout)[:, 0]
    return net.value(torch.cat([flat, obs["queue"]], -1), privileged)
