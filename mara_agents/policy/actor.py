"""MaraNet's actor for one round at a time, in numpy: what the harness acts with.

One round of the shipped policy is a few dozen operations on arrays of a few hundred
numbers, where torch's per-operation overhead is most of the cost; numpy's is a fifth of
it (the flow predictor's ODE solver, :class:`flow_predictor.model.Sampler`, runs in numpy
for the same reason).  :class:`RoundActor` copies a :class:`~mara_agents.policy.network.MaraNet`'s
actor weights and computes what :meth:`MaraNet.encode` and :meth:`MaraNet.head` compute,
operation for operation in float32, for one round observation of
:class:`~mara_env.round_env.RoundEnv` (no batch axis); :meth:`RoundActor.greedy` decodes
the round as :func:`~mara_agents.policy.rounds.greedy_fixed_point` does.  The torch
network stays the definition (training, sampling, the critic): a test checks that both give
the same actions and the same logits to float32 rounding.
"""

from __future__ import annotations

import numpy as np

from mara_agents.policy.network import EMPTY_SLOT_SCORE, MASKED_LOGIT, MaraNet

_LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which MaraNet's blocks use
_POOL_EPS = 1e-6  # MaraNet's guard against an empty pool (no slot, no earlier choice)
# Nodes scored per pass of the greedy fixed point: a pass costs WINDOW x K whatever N is
# (8 was the cheapest of 8 / 16 / 32 / 64 at N = 256, and as cheap as the rest at N = 16).
WINDOW = 8


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _LAYER_NORM_EPS) * weight + bias


class RoundActor:
    """The actor of ``net`` (copied weights, float32) acting on one round at a time."""

    def __init__(self, net: MaraNet) -> None:
        w = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in net.state_dict().items()}
        self.config, self.layout = net.config, net.layout
        self.shared_cols = net.shared_cols.cpu().numpy()
        self.num_slots = net.layout.num_slots

        def linear(name: str, bias: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
            return w[f"{name}.weight"].T.copy(), (w[f"{name}.bias"] if bias else None)

        self.slot_enc = [linear("slot_enc.0"), linear("slot_enc.2")]
        self.node_enc = [linear("node_enc.0"), linear("node_enc.2")]
        self.blocks = []
        for i in range(net.config.attention_layers):
            p = f"blocks.{i}"
            self.blocks.append(
                {
                    "norm1": (w[f"{p}.norm1.weight"], w[f"{p}.norm1.bias"]),
                    "norm2": (w[f"{p}.norm2.weight"], w[f"{p}.norm2.bias"]),
                    "in": (w[f"{p}.attn.in_proj_weight"].T.copy(), w[f"{p}.attn.in_proj_bias"]),
                    "out": linear(f"{p}.attn.out_proj"),
                    "ff": [linear(f"{p}.ff.0"), linear(f"{p}.ff.2")],
                }
            )
        self.heads = net.config.heads
        self.context = linear("context")
        self.score_slot = linear("score_slot")
        self.score_per_node = linear("score_per_node", bias=False)[0]
        self.score_node = linear("score_node", bias=False)[0]
        self.score_context = linear("score_context", bias=False)[0]
        self.score_out = linear("score_out")
        self.idle_pooled = linear("idle_pooled")
        self.idle_node = linear("idle_node", bias=False)[0]
        self.idle_context = linear("idle_context", bias=False)[0]
        self.idle_out = linear("idle_out")

    @staticmethod
    def _mlp(layers: list[tuple[np.ndarray, np.ndarray | None]], x: np.ndarray) -> np.ndarray:
        (w0, b0), (w1, b1) = layers
        return _relu(x @ w0 + b0) @ w1 + b1

    def _attention(self, block: dict, h: np.ndarray, key_bias: np.ndarray) -> np.ndarray:
        """One pre-norm transformer block across slots (``_SlotAttention``)."""
        x = _layer_norm(h, *block["norm1"])
        w_in, b_in = block["in"]
        q, k, v = np.split(x @ w_in + b_in, 3, axis=-1)
        n, dim = h.shape
        d = dim // self.heads
        q = q.reshape(n, self.heads, d).transpose(1, 0, 2)
        k = k.reshape(n, self.heads, d).transpose(1, 2, 0)
        v = v.reshape(n, self.heads, d).transpose(1, 0, 2)
        scores = (q @ k) / np.float32(np.sqrt(d)) + key_bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        att = (scores @ v).transpose(1, 0, 2).reshape(n, dim)
        w_out, b_out = block["out"]
        h = h + (att @ w_out + b_out)
        return h + self._mlp(block["ff"], _layer_norm(h, *block["norm2"]))

    def encode(
        self, slots: np.ndarray, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`MaraNet.encode` of one round's slot rows ``(K, S)`` and mask ``(K + 1,)``:
        the slot embeddings, the scorer's slot terms and the idle head's pooled term."""
        occupied = slots[:, self.layout.occupied_index] > 0.5
        used = np.flatnonzero(occupied | (mask[:-1] > 0))
        width = int(used[-1]) + 1 if len(used) else 1
        slots, occupied = slots[:width], occupied[:width]
        h = self._mlp(self.slot_enc, slots[:, self.shared_cols])
        key_bias = np.where(occupied, np.float32(0.0), np.float32(EMPTY_SLOT_SCORE))
        for block in self.blocks:
            h = self._attention(block, h, key_bias)
        occ = occupied.astype(np.float32)[:, None]
        pooled = (occ * h).sum(0) / (occ.sum(0) + np.float32(_POOL_EPS))
        w, b = self.score_slot
        wp, bp = self.idle_pooled
        return h, h @ w + b, pooled @ wp + bp

    def head(
        self,
        enc: tuple[np.ndarray, np.ndarray, np.ndarray],
        node_terms: tuple[np.ndarray, np.ndarray],
        per_node: np.ndarray,
        mask: np.ndarray,
    ) -> np.ndarray:
        """:meth:`MaraNet.head`: masked logits ``(N, K + 1)`` of the round's nodes, given
        their per-node slot features ``(N, K, 3)`` and masks ``(N, K + 1)``."""
        h, score_slot, idle_pooled = enc
        score_node, idle_node = node_terms
        width = h.shape[0]
        per_node = per_node[:, :width]
        if self.config.independent:  # no view of the round's other choices
            per_node = np.concatenate([np.zeros_like(per_node[..., :2]), per_node[..., 2:]], -1)
            score_ctx = idle_ctx = np.float32(0.0)
        else:
            chosen = np.maximum(per_node[..., 0], 0.0)
            pooled = (chosen @ h) / (chosen.sum(-1, keepdims=True) + np.float32(_POOL_EPS))
            w, b = self.context
            ctx = pooled @ w + b
            score_ctx, idle_ctx = ctx @ self.score_context, ctx @ self.idle_context
        hidden = score_slot[None] + per_node @ self.score_per_node
        hidden += (score_node + score_ctx)[:, None, :]
        _relu(hidden)
        w, b = self.score_out
        slot_logits = (hidden @ w)[..., 0] + b
        if self.config.stay_bias:
            slot_logits = slot_logits + np.float32(self.config.stay_bias) * per_node[..., 2]
        w, b = self.idle_out
        idle_logit = _relu(idle_pooled[None] + idle_node + idle_ctx) @ w + b
        n, k = len(mask), self.num_slots
        out = np.full((n, k + 1), MASKED_LOGIT, np.float32)
        out[:, :width] = slot_logits
        out[:, k] = idle_logit[:, 0]
        valid = mask > 0
        if self.config.work_conserving:
            valid[:, k] = ~valid[:, :k].any(-1)
        return np.where(valid, out, np.float32(MASKED_LOGIT))

    def _per_node(
        self,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        before: np.ndarray,
        one_hot: np.ndarray,
        pending: np.ndarray,
        inv: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The per-node slot features and masks of a run of consecutive nodes given their
        ``actions`` and ``before``, the nodes per slot chosen by the nodes ahead of the run
        (as :func:`~mara_agents.policy.rounds.round_features`: node ``i`` sees nodes
        ``< i``)."""
        k = self.num_slots
        taken = (actions[:, None] == np.arange(k)).astype(np.int64)
        chosen = taken.cumsum(0) - taken + before
        feats = np.stack(
            [(chosen * inv).astype(np.float32), (pending * inv).astype(np.float32), one_hot], -1
        )
        mask = np.repeat(obs["action_mask"][None], len(actions), 0)
        mask[:, :-1] *= (chosen < obs["slot_cap"][None]).astype(mask.dtype)
        return feats, mask

    def greedy(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The ``N`` greedy actions of one round observation, as the fixed point of teacher
        forcing (see :func:`~mara_agents.policy.rounds.greedy_fixed_point`), taken
        :data:`WINDOW` nodes at a time.

        Each pass scores the window of nodes after the settled ones given the current
        guess; the window's nodes up to its first changed action are then settled (each
        was scored given the settled actions before it), the rest take the pass's
        actions as their next guess.  The result is the same fixed point; the window
        bounds a pass's cost on big clusters, where a change early in the round would
        otherwise make every pass rescore all ``N`` nodes."""
        k = self.num_slots
        enc = self.encode(np.asarray(obs["slots"], np.float32), obs["action_mask"])
        n = self._mlp(self.node_enc, np.asarray(obs["nodes"], np.float32))
        score_node, idle_node = n @ self.score_node, n @ self.idle_node
        slot = np.asarray(obs["node_slot"], np.int64)
        one_hot_int = (slot[:, None] == np.arange(k)).astype(np.int64)
        pending = one_hot_int.sum(0)[None] - (one_hot_int.cumsum(0) - one_hot_int)
        inv = 1.0 / np.maximum(np.asarray(obs["slot_cap"], np.float64), 1.0)
        one_hot = one_hot_int.astype(np.float32)
        acts = np.where(slot >= 0, slot, k)
        before = np.zeros(k, np.int64)  # nodes per slot chosen by the settled nodes
        done = 0
        while done < len(slot):
            run = slice(done, min(done + WINDOW, len(slot)))
            feats, mask = self._per_node(obs, acts[run], before, one_hot[run], pending[run], inv)
            terms = (score_node[run], idle_node[run])
            new = self.head(enc, terms, feats, mask).argmax(-1)
            changed = np.flatnonzero(new != acts[run])
            settled = len(new) if not len(changed) else int(changed[0]) + 1
            acts[run] = new
            picked = new[:settled]
            before += np.bincount(picked[picked < k], minlength=k)
            done += settled
        return acts
