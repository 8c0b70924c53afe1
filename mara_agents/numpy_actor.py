"""The actor of a :class:`~mara_agents.network.MaraNet` in numpy, for acting one node at a time.

The harness asks the policy for one node's action at a time (each node sees the choices
made before it in the round), so every call is a batch of one.  Torch spends most of
such a call in per-operator overhead; the same arithmetic in numpy takes about half the
time (``benchmarks/eval_speed.py``).  The weights are copied when the actor is built:
build a new one after changing the network's weights.  :meth:`MaraNet.logits` stays the
reference (training, batches); a test checks that both give the same logits and actions.
"""

from __future__ import annotations

import numpy as np
import torch

from mara_agents.network import MASKED_LOGIT, MINE_INDEX, MaraNet


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def _mlp(seq: torch.nn.Sequential) -> tuple[np.ndarray, ...]:
    first, last = seq[0], seq[2]
    return _np(first.weight).T, _np(first.bias), _np(last.weight).T, _np(last.bias)


def _run_mlp(x: np.ndarray, p: tuple[np.ndarray, ...]) -> np.ndarray:
    w1, b1, w2, b2 = p
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def _layer_norm(x: np.ndarray, p: tuple[np.ndarray, np.ndarray, float]) -> np.ndarray:
    w, b, eps = p
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class NumpyActor:
    """Masked logits ``(K + 1,)`` of one flat observation, as ``net.logits`` computes them."""

    def __init__(self, net: MaraNet) -> None:
        self.layout, self.config = net.layout, net.config
        self.slot_enc, self.node_enc = _mlp(net.slot_enc), _mlp(net.node_enc)
        self.score, self.idle = _mlp(net.score), _mlp(net.idle)
        self.context = (_np(net.context.weight).T, _np(net.context.bias))
        self.blocks = []
        for block in net.blocks:
            attn = block.attn
            self.blocks.append(
                {
                    "norm1": (_np(block.norm1.weight), _np(block.norm1.bias), block.norm1.eps),
                    "norm2": (_np(block.norm2.weight), _np(block.norm2.bias), block.norm2.eps),
                    "in_w": _np(attn.in_proj_weight).T,
                    "in_b": _np(attn.in_proj_bias),
                    "out_w": _np(attn.out_proj.weight).T,
                    "out_b": _np(attn.out_proj.bias),
                    "heads": attn.num_heads,
                    "ff": _mlp(block.ff),
                }
            )

    @staticmethod
    def _attend(h: np.ndarray, key_bias: np.ndarray, blk: dict) -> np.ndarray:
        x = _layer_norm(h, blk["norm1"])
        k_slots, dim = x.shape
        heads = blk["heads"]
        d = dim // heads
        qkv = x @ blk["in_w"] + blk["in_b"]  # (K, 3 * dim)
        q, k, v = (qkv[:, i * dim : (i + 1) * dim].reshape(k_slots, heads, d) for i in range(3))
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + key_bias
        scores -= scores.max(-1, keepdims=True)
        w = np.exp(scores)
        w /= w.sum(-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", w, v).reshape(k_slots, dim)
        h = h + out @ blk["out_w"] + blk["out_b"]
        return h + _run_mlp(_layer_norm(h, blk["norm2"]), blk["ff"])

    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        lay = self.layout
        flat = np.asarray(obs, np.float32)
        node = flat[: lay.node_dim]
        slots = flat[lay.node_dim : lay.obs_dim].reshape(lay.num_slots, lay.slot_dim)
        chosen = slots[:, lay.chosen_index]
        if self.config.independent:
            slots = slots.copy()
            slots[:, [lay.chosen_index, lay.pending_index]] = 0.0
        occupied = slots[:, lay.occupied_index] > 0.5
        h = _run_mlp(slots, self.slot_enc)
        key_bias = np.where(occupied, 0.0, -1e4).astype(np.float32)
        for blk in self.blocks:
            h = self._attend(h, key_bias, blk)
        n = _run_mlp(node, self.node_enc)
        if self.config.independent:
            ctx = np.zeros_like(n)
        else:
            w = np.maximum(chosen, 0.0)
            pooled_choice = (w[:, None] * h).sum(0) / (w.sum() + 1e-6)
            ctx = pooled_choice @ self.context[0] + self.context[1]
        occ = occupied.astype(np.float32)[:, None]
        pooled = (occ * h).sum(0) / (occ.sum() + 1e-6)
        k = lay.num_slots
        per_slot = np.concatenate(
            [h, np.broadcast_to(n, (k, n.size)), np.broadcast_to(ctx, (k, ctx.size))], 1
        )
        slot_logits = _run_mlp(per_slot, self.score)[:, 0]
        if self.config.stay_bias:
            slot_logits = slot_logits + np.float32(self.config.stay_bias) * slots[:, MINE_INDEX]
        idle_logit = _run_mlp(np.concatenate([pooled, n, ctx]), self.idle)
        out = np.concatenate([slot_logits, idle_logit]).astype(np.float32)
        valid = np.asarray(mask) > 0
        if self.config.work_conserving:
            valid = valid.copy()
            valid[-1] = not valid[:-1].any()
        return np.where(valid, out, np.float32(MASKED_LOGIT))
