"""The policy network (plain torch): masks, slot permutations, context, and the round split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara_agents.policy.network import (
    EMPTY_SLOT_SCORE,
    MASKED_LOGIT,
    MaraNet,
    ModelConfig,
    ModelError,
    ObsLayout,
    RoundEncoding,
    _slot_scores,
    _SlotAttention,
)
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


def _reference_block(
    block: torch.nn.Module, h: torch.Tensor, key_bias: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """A ``_SlotAttention`` block through ``nn.MultiheadAttention`` over every slot (the
    ones ``rows`` leaves out as zeros): what its written-out attention replaced."""
    h = h.new_zeros(*rows.shape, h.shape[-1]).index_put((rows,), h)
    x = block.norm1(h)
    bias = key_bias.expand(-1, h.shape[1], -1).repeat_interleave(block.attn.num_heads, 0)
    h = h + block.attn(x, x, x, attn_mask=bias, need_weights=False)[0]
    return (h + block.ff(block.norm2(h)))[rows]


def _reference_head(
    net: MaraNet,
    enc: RoundEncoding,
    nodes: tuple[torch.Tensor, torch.Tensor],
    per_node: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``MaraNet.head`` with the scorer as ``nn.Linear`` and ``torch.relu`` over every slot:
    what the hand-written scorer replaced."""
    score_node, idle_node = nodes
    width = enc.h.shape[1]
    per_node = per_node[..., :width, :]
    if enc.plan is not None:  # the gaps to the plan: their rule is tested on its own
        per_node = torch.cat([per_node, net._plan_gaps(enc.plan, per_node)], -1)
    w = per_node[..., 0].clamp(min=0.0)
    ctx = net.context(torch.einsum("bmk,bkh->bmh", w, enc.h) / (w.sum(-1, keepdim=True) + 1e-6))
    hidden = torch.relu(
        net.score_slot(enc.h)[:, None]
        + net.score_per_node(per_node)
        + (score_node + net.score_context(ctx))[..., None, :]
    )
    slot_logits = net.score_out(hidden).squeeze(-1) + net.config.stay_bias * per_node[..., 2]
    idle = net.idle_out(torch.relu(enc.idle_pooled[:, None] + idle_node + net.idle_context(ctx)))
    rest = slot_logits.new_full(
        (*slot_logits.shape[:-1], net.layout.num_slots - width), MASKED_LOGIT
    )
    out = torch.cat([slot_logits, rest, idle], -1)
    return torch.where(mask > 0, out, torch.full_like(out, MASKED_LOGIT))


def _reference_value(net: MaraNet, state: torch.Tensor) -> torch.Tensor:
    """``MaraNet.value`` with every slot embedded: what embedding the occupied ones replaced."""
    lay = net.layout
    node, slots = net._split(state)
    occ = (slots[..., lay.occupied_index] > 0.5).float()[..., None]
    e = net.critic_slot(slots)
    mean = (occ * e).sum(-2) / (occ.sum(-2) + 1e-6)
    mx = torch.where(occ > 0, e, torch.full_like(e, EMPTY_SLOT_SCORE)).amax(-2).clamp(min=-1.0)
    x = torch.cat([node, state[..., lay.obs_dim :], mean, mx], -1)
    return net.critic_head(x).squeeze(-1) * net.config.value_scale


def _grads(net: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    net.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}


def test_written_out_attention_is_multihead_attention() -> None:
    """The block's attention gives nn.MultiheadAttention's outputs, also for a round
    without an occupied slot (uniform weights), and its gradients; left out, the empty
    slots change nothing."""
    torch.manual_seed(3)
    block = _SlotAttention(16, 4)
    h = torch.randn(8, 6, 16)
    occupied = torch.rand(8, 6) < 0.6
    occupied[0] = False
    key_bias = torch.where(occupied, 0.0, EMPTY_SLOT_SCORE)[:, None, :]
    every = torch.ones_like(occupied)
    got, want = block(h[every], key_bias, every), _reference_block(block, h[every], key_bias, every)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    used = occupied | ~occupied.any(-1, keepdim=True)
    torch.testing.assert_close(
        block(h[used], key_bias, used), want.view(8, 6, 16)[used], rtol=1e-5, atol=1e-5
    )
    # No gradient from the round without an occupied slot: its scores sit at -1e4, where
    # float32 keeps them to 1e-3 (and the network reads nothing of such a round).
    weights = (torch.randn(8, 6, 16) * occupied.any(-1)[:, None, None])[every]
    for a, b in zip(
        _grads(block, (got * weights).sum()).values(),
        _grads(block, (want * weights).sum()).values(),
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_slot_scorer_gradient_is_its_derivative() -> None:
    """The scorer's gradient (autograd through its in-place steps) against finite
    differences (float64)."""
    g = torch.Generator().manual_seed(0)
    p, m, s, b = 7, 3, 4, 3

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    rounds = torch.tensor([0, 0, 1, 2, 2, 2, 0])
    inputs = (
        rand(p, s).requires_grad_(),
        rand(p, m, 3),
        rand(s, 3).requires_grad_(),
        rand(b, m, s).requires_grad_(),
        rounds,
        rand(1, s).requires_grad_(),
        rand(1).requires_grad_(),
    )
    assert torch.autograd.gradcheck(_slot_scores, inputs)


def real_rounds(policy, seed: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """The rounds, batched, of an 8-node val episode at load 2 seen through ``policy``'s
    wrapper, random actions taken; rounds without a task are left out (their attention
    scores sit at -1e4: see the reference block above)."""
    from mara_agents.policy.features import wrap
    from mara_env.cluster_env import env
    from mara_env.round_env import RoundEnv

    k = policy.net.layout.num_slots
    aec = env(num_nodes=8, num_slots=k, horizon=40, split="val", load=2.0)
    view = RoundEnv(
        wrap(aec, policy.wrapper, policy.meta.get("wrapper_options"), settings=policy.features)
    )
    view.reset(seed=seed)
    rounds = []
    while not view.engine.finished:
        obs = view.observe()
        if obs["slots"][:, OCCUPIED].any():
            rounds.append(obs)
        view.play(rng.integers(0, k + 1, size=8))
    return {key: torch.from_numpy(np.stack([r[key] for r in rounds])) for key in rounds[0]}


def test_the_shipped_policy_scores_real_rounds_as_the_dense_formulation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On real rounds (with the predictor features, any earlier choices) the shipped
    network's teacher-forced logits, values and every weight's gradient equal those of
    the formulation its attention, scorer and critic replaced (every slot embedded and
    scored), to float32 rounding."""
    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import SHIPPED_POLICY
    from mara_agents.policy.rounds import (
        flat_views,
        round_features,
        round_value,
        teacher_forced_logits,
    )

    policy = load_policy(SHIPPED_POLICY)
    net = policy.net
    k = net.layout.num_slots
    rng = np.random.default_rng(0)
    obs = real_rounds(policy, 2, rng)
    actions = torch.from_numpy(rng.integers(0, k + 1, size=obs["node_slot"].shape))
    feats, mask = round_features(obs, actions, k)
    assert len(actions) >= 30 and (mask[..., :-1] > 0).any()
    got = teacher_forced_logits(net, obs, actions)
    with monkeypatch.context() as patch:
        patch.setattr(_SlotAttention, "forward", _reference_block)
        enc = net.encode(obs["slots"], obs["action_mask"])
    want = _reference_head(net, enc, net.encode_nodes(obs["nodes"]), feats, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    state = torch.cat([flat_views(obs, feats[:, :1], net.layout)[:, 0], obs["queue"]], -1)
    values, want_values = round_value(net, obs), _reference_value(net, state)
    torch.testing.assert_close(values, want_values, rtol=1e-5, atol=1e-5)
    weights = torch.randn(*mask.shape, generator=torch.Generator().manual_seed(1))
    want_grads = _grads(net, (torch.log_softmax(want, -1) * weights).sum() + want_values.sum())
    for name, grad in _grads(
        net, (torch.log_softmax(got, -1) * weights).sum() + values.sum()
    ).items():
        # to float32 rounding of sums over thousands of terms: relative to the largest entry
        error = float((grad - want_grads[name]).abs().max() / want_grads[name].abs().max())
        assert error < 1e-4, f"{name}: {error:.2g}"


def test_plan_gap_counts_in_nodes_and_starts_as_the_network_it_extends() -> None:
    """On real rounds of the shipped policy's wrapper (pred_share: hedge's count), a
    plan_gap network warm-started from a trained network without plan gaps scores every
    node as that one does; its gaps are the plan's count less the earlier choices (and
    less the nodes still to choose that served the slot), in nodes, clipped; it needs
    pred_share and the round's choices.  The network without them is the shipped one with
    its scorer's two gap columns dropped: trained weights, as a stage's warm start meets
    them (a plan_gap stage starts from the trained stage before it)."""
    from dataclasses import replace

    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.network import PER_NODE_FEATURES, PLAN_GAP_LIMIT, PLAN_INDEX
    from mara_agents.policy.rounds import round_context, round_features, teacher_forced_logits

    policy = load_policy()
    assert policy.net.config.plan_gap
    state = policy.net.state_dict()
    scorer = state["score_per_node.weight"]
    assert scorer.shape[1] == len(PER_NODE_FEATURES) + 2 and scorer[:, -2:].abs().sum() > 0
    plain = MaraNet(policy.net.layout, replace(policy.net.config, plan_gap=False))
    plain.load_state_dict({**state, "score_per_node.weight": scorer[:, : len(PER_NODE_FEATURES)]})
    k = policy.net.layout.num_slots
    rng = np.random.default_rng(1)
    obs = real_rounds(policy, 3, rng)
    actions = torch.from_numpy(rng.integers(0, k + 1, size=obs["node_slot"].shape))
    gap = MaraNet(policy.net.layout, policy.net.config)
    gap.warm_start(plain.state_dict())
    torch.testing.assert_close(
        teacher_forced_logits(gap, obs, actions), teacher_forced_logits(plain, obs, actions)
    )

    feats, _ = round_features(obs, actions, k)
    enc = gap.encode(obs["slots"])
    count, cap = enc.plan.unbind(-1)
    occupied = obs["slots"][..., OCCUPIED] > 0.5
    assert (count[occupied] > 0).any() and (count[~occupied] == 0).all()
    torch.testing.assert_close(cap[occupied], obs["slot_cap"][occupied].float())
    torch.testing.assert_close(count, (obs["slots"][..., PLAN_INDEX] * obs["slot_cap"]).round())
    taken = torch.nn.functional.one_hot(actions, k + 1)[..., :k]
    chosen = taken.cumsum(1) - taken
    pending = round_context(obs, k).pending
    got = gap._plan_gaps(enc.plan, feats)
    want = torch.stack([count[:, None] - chosen, count[:, None] - chosen - pending], -1)
    want = want.float().clamp(-PLAN_GAP_LIMIT, PLAN_GAP_LIMIT)
    real = occupied[:, None].expand_as(chosen)  # an empty slot has no cap: it reads 0
    torch.testing.assert_close(got[real], want[real])
    assert (got.abs() == PLAN_GAP_LIMIT).any() and (got.abs() < PLAN_GAP_LIMIT).any()

    with pytest.raises(ModelError, match="pred_share"):
        make_net(plan_gap=True)  # slot rows of the env alone
    with pytest.raises(ModelError, match="independent"):
        MaraNet(policy.net.layout, replace(policy.net.config, plan_gap=True, independent=True))
