"""The round-level RLlib module: its decoder, teacher forcing, and exported weights acting
the same node by node in the AEC env as round by round in the round view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from mara_agents.policy.inference import load_policy
from mara_agents.policy.rounds import decode
from mara_agents.training.export import export_checkpoint
from mara_agents.training.rl_module import MaraRoundModule
from mara_env.cluster_env import env
from mara_env.round_env import RoundEnv

MODEL = {"hidden": 16, "heads": 2, "critic_hidden": 16, "stay_bias": 2.0}


def make_module(rounds: RoundEnv, seed: int = 0) -> MaraRoundModule:
    torch.manual_seed(seed)
    return MaraRoundModule(
        observation_space=rounds.observation_space,
        action_space=rounds.action_space,
        model_config=dict(MODEL),
    )


def _batch(obs_list: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([o[k] for o in obs_list])) for k in obs_list[0]}


def _round_observations(config: dict, n_envs: int, rounds: int) -> list[dict[str, np.ndarray]]:
    """Round observations from several episodes driven by random valid-ish actions."""
    out = []
    for e in range(n_envs):
        r = RoundEnv(**config)
        obs, _ = r.reset(seed=e)
        rng = np.random.default_rng(e)
        for _ in range(rounds):
            out.append(obs)
            valid = np.flatnonzero(obs["action_mask"])
            obs, _, term, trunc, _ = r.step(rng.choice(valid, size=len(obs["node_slot"])))
            if term or trunc:
                break
    return out


def test_teacher_forced_logp_is_the_sum_of_the_sequential_node_logps(small_config: dict) -> None:
    rounds = RoundEnv(**small_config)
    module = make_module(rounds)
    batch = _batch(_round_observations(small_config, 3, 12))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        actions, logp, logits = decode(module.net, batch, greedy=False, generator=g)
        out = module.forward_train({Columns.OBS: batch, Columns.ACTIONS: actions})
    forced = out[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(forced, logits.flatten(1), rtol=1e-5, atol=1e-4)
    dist = module.get_train_action_dist_cls().from_logits(forced)
    torch.testing.assert_close(dist.logp(actions), logp, rtol=1e-5, atol=1e-4)
    # each node's sampled action was valid under the mask it saw
    per_node = torch.log_softmax(logits, -1).gather(-1, actions[..., None]).squeeze(-1)
    assert (per_node > -50).all()
    # exploration returns the same three things RLlib's connectors expect
    with torch.no_grad():
        exp = module.forward_exploration({Columns.OBS: batch})
    assert exp[Columns.ACTIONS].shape == actions.shape
    assert exp[Columns.ACTION_LOGP].shape == (len(actions),)
    values = module.compute_values({Columns.OBS: batch})
    assert values.shape == (len(actions),) and torch.isfinite(values).all()


@pytest.mark.parametrize("greedy", [True, False])
def test_exported_weights_act_identically_node_by_node(
    tmp_path: Path, small_config: dict, greedy: bool
) -> None:
    rounds = RoundEnv(**small_config)
    module = make_module(rounds, seed=3)
    module.save_to_path(tmp_path / "ckpt")
    policy = load_policy(export_checkpoint(tmp_path / "ckpt", tmp_path / "p.pt"))
    assert policy.net.config.stay_bias == MODEL["stay_bias"]
    aec = env(**small_config)
    n = rounds.engine.config.num_nodes
    for seed in (0, 1):
        obs, _ = rounds.reset(seed=seed)
        aec.reset(seed=seed)
        g = torch.Generator().manual_seed(seed)
        while True:
            with torch.no_grad():
                actions, _, logits = decode(module.net, _batch([obs]), greedy=greedy, generator=g)
            for i in range(n):
                o, *_ = aec.last()
                # the policy file, fed the AEC env's observation, gives node i's logits
                np.testing.assert_allclose(
                    policy.logits(o), logits[0, i].numpy(), rtol=1e-4, atol=1e-4
                )
                a = policy.act(o) if greedy else int(actions[0, i])
                assert a == int(actions[0, i]) or not greedy
                aec.step(a)
            obs, _, term, trunc, _ = rounds.step(actions[0].numpy())
            assert aec.engine.sim.t == rounds.engine.sim.t
            np.testing.assert_array_equal(aec.engine.sim.node_task, rounds.engine.sim.node_task)
            if term or trunc:
                break
        assert aec.terminations["node_0"] or aec.truncations["node_0"]
        assert aec.infos["node_0"]["episode"] == rounds.engine.sim.metrics()


def test_stay_bias_keeps_a_fresh_policy_on_its_task(small_config: dict) -> None:
    rounds = RoundEnv(**small_config)
    batch = _batch(_round_observations(small_config, 3, 20))
    mine = batch["node_slot"] >= 0
    stayed = {}
    for bias in (0.0, 6.0):
        torch.manual_seed(0)
        module = MaraRoundModule(
            observation_space=rounds.observation_space,
            action_space=rounds.action_space,
            model_config={**MODEL, "stay_bias": bias},
        )
        with torch.no_grad():
            actions, _, _ = decode(module.net, batch, greedy=False, generator=torch.Generator())
        stayed[bias] = float((actions == batch["node_slot"])[mine].float().mean())
    assert stayed[6.0] > 0.8 > stayed[0.0]


def test_the_round_distribution_is_rllibs_multi_categorical() -> None:
    """The PPO loss reads the same log-probs, entropies and KLs (and their gradients) from
    RoundDistribution as from RLlib's TorchMultiCategorical of N equal parts, with masked
    actions."""
    from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical

    from mara_agents.policy.network import MASKED_LOGIT
    from mara_agents.training.rl_module import RoundDistribution

    n, k = 5, 6
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, n, k + 1, generator=g) * 3
    logits[torch.rand(64, n, k + 1, generator=g) < 0.4] = MASKED_LOGIT
    logits[..., -1] = torch.randn(64, n, generator=g)  # idle: always valid
    noise = torch.randn(64, n, k + 1, generator=g)
    prev = torch.where(logits > MASKED_LOGIT, logits + noise, logits)
    torch.manual_seed(1)
    actions = torch.distributions.Categorical(logits=logits).sample()
    ours = RoundDistribution.get_partial_dist_cls(num_nodes=n)
    theirs = TorchMultiCategorical.get_partial_dist_cls(input_lens=[k + 1] * n)
    results = []
    for cls in (ours, theirs):
        x = logits.flatten(1).clone().requires_grad_()
        dist, old = cls.from_logits(x), cls.from_logits(prev.flatten(1))
        terms = (dist.logp(actions), dist.entropy(), old.kl(dist))
        (grad,) = torch.autograd.grad(sum(t.sum() for t in terms), x)
        results.append((*terms, grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert ours.from_logits(logits.flatten(1)).to_deterministic().sample().shape == (64, n)


def test_the_round_distributions_kl_stays_finite_where_probabilities_underflow() -> None:
    """A sharp policy's far tail underflows to probability 0 in float32: the KL is then the
    sum of p (log p - log q) (float64's value), not torch's inf; masked actions add 0."""
    from mara_agents.policy.network import MASKED_LOGIT
    from mara_agents.training.rl_module import RoundDistribution

    old = torch.tensor([[0.0, -100.0, MASKED_LOGIT, 0.5, 0.0, -3.0]])  # 2 nodes, K + 1 = 3
    new = torch.tensor([[0.0, -120.0, MASKED_LOGIT, 0.0, 0.5, -3.0]])
    assert torch.isinf(
        torch.distributions.kl_divergence(
            torch.distributions.Categorical(logits=old.view(2, 3)),
            torch.distributions.Categorical(logits=new.view(2, 3)),
        ).sum()
    )
    kl = RoundDistribution.from_logits(old, 2).kl(RoundDistribution.from_logits(new, 2))
    p = torch.log_softmax(old.double().view(2, 3), -1)
    q = torch.log_softmax(new.double().view(2, 3), -1)
    want = (p.exp() * (p - q)).nan_to_num().sum()
    assert torch.isfinite(kl).all()
    torch.testing.assert_close(kl.double(), want.view(1), rtol=1e-5, atol=1e-7)
