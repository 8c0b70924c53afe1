"""The policy network (plain torch): masks, slot permutations, context, and the round split."""

from __future__ import annotations

import pytest
import torch

from mara_agents.policy.network import MaraNet, ModelConfig, ModelError, ObsLayout
from mara_env.cluster_env import NODE_FEATURES, QUEUE_FEATURES, SLOT_FEATURES

K, NODE, SLOT = 5, len(NODE_FEATURES), len(SLOT_FEATURES)
CHOSEN = SLOT_FEATURES.index("nodes_chosen")
OCCUPIED = SLOT_FEATURES.index("occupied")


def random_batch(
    n: int, seed: int = 0, slot_dim: int = SLOT, k: int = K
) -> dict[str, torch.Tensor]:
    """Observations, masks (idle always valid) and states with ~70% of slots occupied."""
    g = torch.Generator().manual_seed(seed)
    d = NODE + k * slot_dim
    obs = torch.randn(n, d, generator=g) * 3
    slots = obs[:, NODE:].view(n, k, slot_dim)
    slots[..., OCCUPIED] = (torch.rand(n, k, generator=g) < 0.7).float()
    mask = (torch.rand(n, k + 1, generator=g) < 0.4).to(torch.int8)
    mask[:, -1] = 1
    state = torch.cat([obs, torch.randn(n, len(QUEUE_FEATURES), generator=g)], -1)
    return {"observation": obs, "action_mask": mask, "state": state}


def make_net(slot_dim: int = SLOT, k: int = K, **model: object) -> MaraNet:
    """A small seeded network for ``k`` slots of ``slot_dim`` features."""
    torch.manual_seed(0)
    d = NODE + k * slot_dim
    layout = ObsLayout.infer(d, d + len(QUEUE_FEATURES), k + 1)
    return MaraNet(layout, ModelConfig(**{"hidden": 16, "heads": 2, "critic_hidden": 16, **model}))


def test_work_conserving_idles_only_when_no_slot_is_valid() -> None:
    net = make_net(work_conserving=True)
    batch = random_batch(512, seed=5)
    actions = net.logits(batch["observation"], batch["action_mask"]).argmax(-1)
    any_slot = batch["action_mask"][:, :-1].bool().any(-1)
    assert ((actions == K) == ~any_slot).all()


def test_slot_permutation_permutes_the_logits() -> None:
    net = make_net()
    batch = random_batch(64, seed=1)
    perm = torch.tensor([3, 0, 4, 1, 2])
    obs = batch["observation"]
    slots = obs[:, NODE:].view(64, K, SLOT)
    pobs = torch.cat([obs[:, :NODE], slots[:, perm].reshape(64, -1)], -1)
    pmask = torch.cat([batch["action_mask"][:, perm], batch["action_mask"][:, -1:]], -1)
    a = net.logits(obs, batch["action_mask"])
    b = net.logits(pobs, pmask)
    torch.testing.assert_close(b[:, :-1], a[:, perm], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(b[:, -1], a[:, -1], atol=1e-4, rtol=1e-4)


def test_independent_ignores_earlier_choices_and_default_uses_them() -> None:
    batch = random_batch(32, seed=2)
    changed = batch["observation"].clone()
    changed[:, NODE:].view(32, K, SLOT)[..., CHOSEN] += 0.5
    for independent in (True, False):
        net = make_net(independent=independent)
        a = net.logits(batch["observation"], batch["action_mask"])
        b = net.logits(changed, batch["action_mask"])
        assert torch.allclose(a, b) == independent


def test_layout_errors_are_clear() -> None:
    with pytest.raises(ModelError, match="does not split"):
        ObsLayout.infer(NODE + 5 * SLOT + 3, NODE + 5 * SLOT + 7, 6)
    layout = ObsLayout.infer(NODE + 5 * 18, NODE + 5 * 18 + len(QUEUE_FEATURES), 6)
    assert (layout.slot_dim, layout.num_slots) == (18, 5)
    assert isinstance(MaraNet(layout, ModelConfig()), torch.nn.Module)


@pytest.mark.parametrize("independent", [False, True])
def test_per_node_features_do_not_enter_the_round_encoding(independent: bool) -> None:
    """encode() reads only the round features: changing a node's own columns leaves it be,
    and logits() equals encode() once plus head() for that node."""
    net = make_net(independent=independent, attention_layers=2)
    batch = random_batch(16, seed=4)
    obs = batch["observation"]
    slots = obs[:, NODE:].view(16, K, SLOT)
    changed = slots.clone()
    changed[..., [CHOSEN, CHOSEN + 1, len(SLOT_FEATURES) - 1]] += 1.0
    for a, b in zip(net.encode(slots), net.encode(changed)):
        torch.testing.assert_close(a, b)
    per_node = slots[..., net.per_node_cols]
    head = net.head(
        net.encode(slots),
        net.encode_nodes(obs[:, None, :NODE]),
        per_node[:, None],
        batch["action_mask"][:, None],
    )
    torch.testing.assert_close(head[:, 0], net.logits(obs, batch["action_mask"]))
