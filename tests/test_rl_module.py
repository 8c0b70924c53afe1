"""The policy network: masks respected, slot permutations respected, export round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns

from flow_predictor.wrapper import PREDICTOR_FEATURES
from mara_agents.export import MaraAgent, export_checkpoint, load_policy
from mara_agents.rl_module import MaraNet, MaraRLModule, ModelConfig, ModelError, ObsLayout
from mara_env.cluster_env import SLOT_FEATURES

K, NODE, SLOT = 5, 8, len(SLOT_FEATURES)
CHOSEN = SLOT_FEATURES.index("nodes_chosen")


def obs_space(slot_dim: int = SLOT, k: int = K) -> spaces.Dict:
    d = NODE + k * slot_dim
    return spaces.Dict(
        {
            "observation": spaces.Box(-10, 10, (d,), np.float32),
            "action_mask": spaces.Box(0, 1, (k + 1,), np.int8),
            "state": spaces.Box(-10, 10, (d + 4,), np.float32),
        }
    )


def random_batch(
    n: int, seed: int = 0, slot_dim: int = SLOT, k: int = K
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d = NODE + k * slot_dim
    obs = torch.randn(n, d, generator=g) * 3
    slots = obs[:, NODE:].view(n, k, slot_dim)
    slots[..., 0] = (torch.rand(n, k, generator=g) < 0.7).float()  # occupied
    mask = (torch.rand(n, k + 1, generator=g) < 0.4).to(torch.int8)
    mask[:, -1] = 1  # idle is always valid
    state = torch.cat([obs, torch.randn(n, 4, generator=g)], -1)
    return {"observation": obs, "action_mask": mask, "state": state}


def make_module(slot_dim: int = SLOT, **model: object) -> MaraRLModule:
    torch.manual_seed(0)
    return MaraRLModule(
        observation_space=obs_space(slot_dim),
        action_space=spaces.Discrete(K + 1),
        model_config={"hidden": 16, "heads": 2, "critic_hidden": 16, **model},
    )


# without / with predictor features
@pytest.mark.parametrize("slot_dim", [SLOT, SLOT + len(PREDICTOR_FEATURES)])
def test_never_picks_a_masked_action(slot_dim: int) -> None:
    module = make_module(slot_dim)
    batch = random_batch(512, slot_dim=slot_dim)
    mask = batch["action_mask"].bool()
    for forward in (module.forward_inference, module.forward_exploration):
        logits = forward({Columns.OBS: dict(batch)})[Columns.ACTION_DIST_INPUTS]
        assert torch.isfinite(logits).all()
        assert mask.gather(1, logits.argmax(-1, keepdim=True)).all()
        dist = module.get_exploration_action_dist_cls().from_logits(logits)
        for _ in range(5):
            assert mask.gather(1, dist.sample()[:, None]).all()
        assert torch.isfinite(dist.entropy()).all()
        assert (dist.logp(torch.full((512,), K)) > -50).all()  # idle stays possible


def test_work_conserving_idles_only_when_no_slot_is_valid() -> None:
    net = make_module(work_conserving=True).net
    batch = random_batch(512, seed=5)
    actions = net.logits(batch["observation"], batch["action_mask"]).argmax(-1)
    any_slot = batch["action_mask"][:, :-1].bool().any(-1)
    assert ((actions == K) == ~any_slot).all()


def test_slot_permutation_permutes_the_logits() -> None:
    net = make_module().net
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
        net = make_module(independent=independent).net
        a = net.logits(batch["observation"], batch["action_mask"])
        b = net.logits(changed, batch["action_mask"])
        assert torch.allclose(a, b) == independent


def test_centralized_critic_reads_state() -> None:
    module = make_module()
    batch = random_batch(16, seed=3)
    v = module.compute_values({Columns.OBS: batch})
    assert v.shape == (16,)
    batch["state"][:, -4:] += 1.0  # queue features are only in the state
    assert not torch.allclose(v, module.compute_values({Columns.OBS: batch}))


def test_layout_errors_are_clear() -> None:
    with pytest.raises(ModelError, match="does not split"):
        ObsLayout.infer(8 + 5 * SLOT + 3, 8 + 5 * SLOT + 7, 6)
    layout = ObsLayout.infer(8 + 5 * 18, 8 + 5 * 18 + 4, 6)
    assert (layout.slot_dim, layout.num_slots) == (18, 5)
    assert isinstance(MaraNet(layout, ModelConfig()), torch.nn.Module)


def test_export_round_trip_matches_the_module(tmp_path: Path) -> None:
    module = make_module()
    module.save_to_path(tmp_path / "ckpt")
    path = export_checkpoint(tmp_path / "ckpt", tmp_path / "policy.pt")
    assert path.stat().st_size < 200_000
    policy = load_policy(path)
    batch = random_batch(200, seed=4)
    greedy = module.forward_inference({Columns.OBS: dict(batch)})[Columns.ACTION_DIST_INPUTS]
    actions = [policy.act({k: v[i].numpy() for k, v in batch.items()}) for i in range(200)]
    assert actions == greedy.argmax(-1).tolist()
    one = {k: v[0].numpy() for k, v in batch.items()}
    policy.seed(7)
    sampled = [policy.act(one, greedy=False) for _ in range(50)]
    policy.seed(7)
    assert sampled == [policy.act(one, greedy=False) for _ in range(50)]
    assert all(one["action_mask"][a] for a in sampled)
    assert isinstance(MaraAgent(policy), MaraAgent)


def test_load_policy_rejects_other_files(tmp_path: Path) -> None:
    torch.save({"weights": 1}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a MARA policy"):
        load_policy(tmp_path / "x.pt")
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "missing.pt")


def test_old_policy_files_and_wrong_observations_are_named(tmp_path: Path) -> None:
    module = make_module()
    module.save_to_path(tmp_path / "ckpt")
    path = export_checkpoint(tmp_path / "ckpt", tmp_path / "policy.pt")
    data = torch.load(path, weights_only=False)
    torch.save({**data, "version": 1}, tmp_path / "v1.pt")
    with pytest.raises(ValueError, match="version 1; expected 2.*nodes_pending"):
        load_policy(tmp_path / "v1.pt")
    policy = load_policy(path)
    batch = random_batch(1, seed=4, k=K + 1)  # one slot more than the policy was built for
    obs = {k: v[0].numpy() for k, v in batch.items()}
    with pytest.raises(ValueError, match=f"expects .*build the env with num_slots={K}"):
        policy.act(obs)


@pytest.mark.parametrize("wrapper", ["none", "wls"])
def test_module_fits_the_env_with_and_without_predictor_features(
    wrapper: str, small_config: dict
) -> None:
    from mara_agents.rllib_env import env_creator

    env = env_creator({"cluster": small_config, "wrapper": wrapper})
    space = next(iter(env.observation_spaces.values()))
    module = MaraRLModule(
        observation_space=space,
        action_space=next(iter(env.action_spaces.values())),
        model_config={"hidden": 8, "heads": 2, "critic_hidden": 8},
    )
    assert module.layout.slot_dim == SLOT + (0 if wrapper == "none" else len(PREDICTOR_FEATURES))
    obs, _ = env.reset(seed=1)
    for _ in range(60):
        agent, o = next(iter(obs.items()))
        batch = {k: torch.as_tensor(np.asarray(v))[None] for k, v in o.items()}
        logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
        obs, _, term, trunc, _ = env.step({agent: int(logits.argmax())})
        if term.get("__all__") or trunc.get("__all__"):
            break


def test_warm_start_weights_reach_the_module(tmp_path: Path) -> None:
    from mara_agents.experiment import parse_experiment
    from mara_agents.train import build_config

    source = make_module()
    with torch.no_grad():  # differ from make_module()'s seeded init
        for p in source.net.parameters():
            p.add_(0.5)
    torch.save(source.net.state_dict(), tmp_path / "w.pt")
    exp = parse_experiment({"name": "t", "env": {"num_slots": K}, "model": {"hidden": 16}})
    config = build_config(exp, init_weights=str(tmp_path / "w.pt"))
    spec = config.rl_module_spec.rl_module_specs["shared"]
    assert spec.model_config["init_weights"] == str(tmp_path / "w.pt")
    module = make_module(init_weights=str(tmp_path / "w.pt"))
    for a, b in zip(source.net.parameters(), module.net.parameters()):
        assert torch.equal(a, b)


def test_warm_start_export_matches_the_network(tmp_path: Path) -> None:
    from mara_agents.experiment import parse_experiment
    from mara_agents.export import export_warm_start

    module = make_module()
    torch.save(module.net.state_dict(), tmp_path / "w.pt")
    model = {"hidden": 16, "heads": 2, "critic_hidden": 16}
    exp = parse_experiment({"name": "t", "env": {"num_slots": K}, "model": model})
    policy = load_policy(export_warm_start(tmp_path / "w.pt", exp, tmp_path / "p.pt"))
    batch = random_batch(50, seed=6)
    expected = module.net.logits(batch["observation"], batch["action_mask"]).argmax(-1)
    got = [policy.act({k: v[i].numpy() for k, v in batch.items()}) for i in range(50)]
    assert got == expected.tolist()


def test_pretrain_with_dagger_writes_stages_and_resumes(tmp_path: Path) -> None:
    from mara_agents.experiment import parse_experiment
    from mara_agents.train import collect_demonstrations, pretrain

    exp = parse_experiment(
        {
            "name": "t",
            "env": {"num_nodes": 4, "num_slots": 3, "horizon": 15, "split": "train"},
            "model": {"hidden": 16, "heads": 2, "critic_hidden": 16},
            "pretrain": {
                "scheduler": "uniform",
                "episodes": 2,
                "epochs": 2,
                "value_epochs": 1,
                "dagger_rounds": 1,
                "dagger_episodes": 2,
                "dagger_epochs": 1,
            },
        }
    )
    out = tmp_path / "t_pretrain.pt"
    lines: list[str] = []
    pretrain(exp, out, log=lines.append)
    assert out.is_file() and (tmp_path / "t_pretrain_bc.pt").is_file()
    assert (tmp_path / "t_pretrain_dagger1.pt").is_file()
    assert any(line.startswith("dagger round 1:") for line in lines)
    # Resuming loads the finished stages instead of fitting again: same weights, no epochs.
    before = torch.load(out, weights_only=True)
    lines.clear()
    pretrain(exp, out, log=lines.append, resume=True)
    assert not any("epoch" in line for line in lines)
    after = torch.load(out, weights_only=True)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # A DAgger episode is driven by the clone but labelled by the teacher.
    layout = ObsLayout.infer(8 + 3 * SLOT, 8 + 3 * SLOT + 4, 4)
    net = MaraNet(layout, ModelConfig(hidden=16, heads=2, critic_hidden=16))
    net.load_state_dict(after)
    teacher = collect_demonstrations(exp, 1, seed=7)
    driven = collect_demonstrations(exp, 1, seed=7, policy=net)
    assert driven["action"].shape == driven["return"].shape
    assert set(np.unique(driven["action"])) <= set(range(4))
    assert len(teacher["action"]) == len(driven["action"])  # same episode length (all rounds)


@pytest.mark.parametrize("independent", [False, True])
def test_numpy_actor_matches_the_torch_network(independent: bool) -> None:
    """The policy file's numpy actor (used for acting) computes net.logits."""
    from mara_agents.numpy_actor import NumpyActor

    layout = ObsLayout(node_dim=NODE, slot_dim=SLOT + 3, num_slots=K, state_extra=4)
    config = ModelConfig(
        hidden=32, heads=4, attention_layers=2, independent=independent, work_conserving=independent
    )
    net = MaraNet(layout, config).eval()
    batch = random_batch(64, slot_dim=SLOT + 3, seed=3)
    with torch.no_grad():
        expected = net.logits(batch["observation"], batch["action_mask"]).numpy()
    actor = NumpyActor(net)
    obs, mask = batch["observation"].numpy(), batch["action_mask"].numpy()
    got = np.stack([actor.logits(o, m) for o, m in zip(obs, mask)])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == expected.argmax(1)).all()
