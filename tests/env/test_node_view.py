"""The one rule for what a node sees of its round's earlier choices, on numpy and torch."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.node_view import inverse_caps, slot_view

CAP = np.array([0, 1, 3, 8])  # an empty slot, then caps 1, 3 and 8
CHOSEN = np.array([0, 1, 2, 8])
PENDING = np.array([0, 0, 1, 5])


def test_counts_are_read_over_the_cap_and_a_slot_takes_nodes_until_its_cap() -> None:
    nodes_chosen, nodes_pending, room = slot_view(CHOSEN, PENDING, inverse_caps(np, CAP), CAP)
    np.testing.assert_array_equal(nodes_chosen, [0.0, 1.0, 2 / 3, 1.0])
    np.testing.assert_array_equal(nodes_pending, [0.0, 0.0, 1 / 3, 5 / 8])
    assert room.tolist() == [False, False, True, False]  # empty, full, room, full
    # one slot at a time, as the env applies it while nodes choose
    assert slot_view(CHOSEN[2], PENDING[2], inverse_caps(np, CAP)[2], CAP[2])[2]


def test_torch_tensors_get_the_same_numbers() -> None:
    torch = pytest.importorskip("torch")
    want = slot_view(CHOSEN, PENDING, inverse_caps(np, CAP), CAP)
    cap = torch.from_numpy(CAP)
    inv = inverse_caps(torch, cap)
    assert inv.dtype == torch.float64
    got = slot_view(torch.from_numpy(CHOSEN), torch.from_numpy(PENDING), inv, cap)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
