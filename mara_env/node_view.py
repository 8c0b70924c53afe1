"""What a node sees of its decision round's earlier choices: the one rule, for numpy and torch.

Three slot columns of an observation change while a round goes on: ``nodes_chosen``,
``nodes_pending`` and ``is_mine`` (the node's own slot, a plain one-hot), and so does the
action mask.  :func:`slot_view` gives the first two and the mask's slot entries from the
slots' node counts.  The env (:class:`mara_env.engine.ClusterEngine`) calls it on
numpy scalars and arrays as nodes choose; the policy's decoder
(:mod:`mara_agents.policy.rounds`) calls it on torch tensors of every node of a batch of
rounds.  The code uses operators only, or the array namespace ``xp`` (``numpy`` or
``torch``) where it makes an array, so it imports neither: ``mara_env`` stays torch-free.
"""

from __future__ import annotations

from typing import Any

Array = Any  # a numpy or torch array, or a numpy scalar


def inverse_caps(xp: Any, slot_cap: Array) -> Array:
    """``1 / max(cap, 1)`` of each slot in float64: the scale of its node counts."""
    return 1.0 / xp.clip(xp.asarray(slot_cap, dtype=xp.float64), min=1.0)


def slot_view(
    chosen: Array, pending: Array, inv_cap: Array, slot_cap: Array
) -> tuple[Array, Array, Array]:
    """``nodes_chosen`` and ``nodes_pending`` (float64; observations hold them in float32)
    and whether the node may choose the slot, from the counts of earlier nodes' choices
    (``chosen``) and of nodes still to choose that served the slot in the last tick
    (``pending``); ``inv_cap``: :func:`inverse_caps`.

    A slot takes nodes until earlier choices fill its cap; an empty slot has cap 0, so it
    takes none.  Any shapes that broadcast together.
    """
    return chosen * inv_cap, pending * inv_cap, chosen < slot_cap
