"""The RLlib module: masks and critic through RLlib's API, export round trips, warm starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns

from mara_agents.policy.agent import MaraAgent
from mara_agents.policy.features import ADDED_FEATURES
from mara_agents.policy.inference import load_policy
from mara_agents.policy.network import MaraNet, ModelConfig, ObsLayout
from mara_agents.training.export import export_checkpoint
from mara_agents.training.rl_module import MaraRLModule
from mara_env.config import ConfigError
from tests.agents.policy.test_network import NODE, SLOT, K, random_batch


def obs_space(slot_dim: int = SLOT, k: int = K) -> spaces.Dict:
    d = NODE + k * slot_dim
    return spaces.Dict(
        {
            "observation": spaces.Box(-10, 10, (d,), np.float32),
            "action_mask": spaces.Box(0, 1, (k + 1,), np.int8),
            "state": spaces.Box(-10, 10, (d + 4,), np.float32),
        }
    )


def make_module(slot_dim: int = SLOT, **model: object) -> MaraRLModule:
    torch.manual_seed(0)
    return MaraRLModule(
        observation_space=obs_space(slot_dim),
        action_space=spaces.Discrete(K + 1),
        model_config={"hidden": 16, "heads": 2, "critic_hidden": 16, **model},
    )


# without / with predictor features
@pytest.mark.parametrize("slot_dim", [SLOT, SLOT + len(ADDED_FEATURES)])
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


def test_centralized_critic_reads_state() -> None:
    module = make_module()
    batch = random_batch(16, seed=3)
    v = module.compute_values({Columns.OBS: batch})
    assert v.shape == (16,)
    batch["state"][:, -4:] += 1.0  # queue features are only in the state
    assert not torch.allclose(v, module.compute_values({Columns.OBS: batch}))


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


@pytest.mark.parametrize("wrapper", ["none", "wls"])
def test_module_fits_the_env_with_and_without_predictor_features(
    wrapper: str, small_config: dict
) -> None:
    from mara_agents.training.rllib_env import env_creator

    env = env_creator({"cluster": small_config, "wrapper": wrapper})
    space = next(iter(env.observation_spaces.values()))
    module = MaraRLModule(
        observation_space=space,
        action_space=next(iter(env.action_spaces.values())),
        model_config={"hidden": 8, "heads": 2, "critic_hidden": 8},
    )
    assert module.layout.slot_dim == SLOT + (0 if wrapper == "none" else len(ADDED_FEATURES))
    obs, _ = env.reset(seed=1)
    for _ in range(60):
        agent, o = next(iter(obs.items()))
        batch = {k: torch.as_tensor(np.asarray(v))[None] for k, v in o.items()}
        logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
        obs, _, term, trunc, _ = env.step({agent: int(logits.argmax())})
        if term.get("__all__") or trunc.get("__all__"):
            break


def test_warm_start_weights_reach_the_module(tmp_path: Path) -> None:
    from mara_agents.training.experiment import parse_experiment
    from mara_agents.training.ppo import build_config

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
    # a policy file (`mara export`) serves as well, its header and weights checked
    from mara_agents.policy.policy_file import PolicyFileError, save_policy

    policy = save_policy(source.net, tmp_path / "p.pt", {"cluster": {}, "wrapper": "none"})
    module = make_module(init_weights=str(policy))
    for a, b in zip(source.net.parameters(), module.net.parameters()):
        assert torch.equal(a, b)
    data = torch.load(policy, weights_only=True)
    data["state_dict"]["slot_enc.0.weight"][0, 0] = float("nan")
    torch.save(data, tmp_path / "nan.pt")
    with pytest.raises(PolicyFileError, match="NaN or inf"):
        make_module(init_weights=str(tmp_path / "nan.pt"))


def test_warm_start_export_matches_the_network(tmp_path: Path) -> None:
    from mara_agents.training.experiment import parse_experiment
    from mara_agents.training.export import export_warm_start

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
    from mara_agents.training.clone import collect_demonstrations, pretrain
    from mara_agents.training.experiment import parse_experiment

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
    # More DAgger rounds on resume: the saved stages are reused, only the new round is fit;
    # any other change is still refused.
    more = dataclasses.replace(exp, pretrain=dataclasses.replace(exp.pretrain, dagger_rounds=2))
    lines.clear()
    pretrain(more, out, log=lines.append, resume=True)
    assert [line for line in lines if line.startswith("pretrain: resumed")] == [
        f"pretrain: resumed {tmp_path / 't_pretrain_bc.pt'}",
        f"pretrain: resumed {tmp_path / 't_pretrain_dagger1.pt'}",
    ]
    assert any(line.startswith("dagger round 2:") for line in lines)
    assert (tmp_path / "t_pretrain_dagger2.pt").is_file()
    other = dataclasses.replace(exp, pretrain=dataclasses.replace(exp.pretrain, epochs=3))
    with pytest.raises(ConfigError, match=r"pretrain\.epochs: 2 -> 3"):
        pretrain(other, out, resume=True)
    # A DAgger episode is driven by the clone but labelled by the teacher.
    layout = ObsLayout.infer(8 + 3 * SLOT, 8 + 3 * SLOT + 4, 4)
    net = MaraNet(layout, ModelConfig(hidden=16, heads=2, critic_hidden=16))
    net.load_state_dict(after)
    teacher = collect_demonstrations(exp, [7])
    driven = collect_demonstrations(exp, [7], policy=net)
    assert driven["action"].shape == driven["return"].shape
    assert set(np.unique(driven["action"])) <= set(range(4))
    assert len(teacher["action"]) == len(driven["action"])  # same episode length (all rounds)


@pytest.mark.parametrize("where", [b"mara_agents.train", b"mara_agents.ppo"])
def test_export_reads_params_of_runs_made_before_the_moves(tmp_path: Path, where: bytes) -> None:
    """A run's params.pkl names the callback and mapping function where they lived then
    (``mara_agents.train`` before train.py was split, ``mara_agents.ppo`` before the
    training room); export still reads its env config."""
    import pickle

    from mara_agents.training.export import _env_of
    from mara_agents.training.ppo import MaraMetrics, policy_mapping_fn

    params = {"callbacks": MaraMetrics, "map": policy_mapping_fn, "env_config": {"wrapper": "wls"}}
    old = pickle.dumps(params, protocol=0).replace(
        b"cmara_agents.training.ppo\n", b"c" + where + b"\n"
    )
    assert b"mara_agents.training.ppo" not in old
    with pytest.raises((AttributeError, ModuleNotFoundError)):
        pickle.loads(old)
    (tmp_path / "params.pkl").write_bytes(old)
    assert _env_of(tmp_path / "checkpoint_000001") == {"wrapper": "wls"}


def test_dagger_rounds_continue_from_init_weights(tmp_path: Path) -> None:
    """``init_weights`` with ``episodes: 0`` and DAgger rounds: no cloning stage, the
    rounds start from those weights (the policy drives, the teacher labels) and move them."""
    from mara_agents.training.clone import pretrain
    from mara_agents.training.experiment import parse_experiment

    env = {"num_nodes": 4, "num_slots": 3, "horizon": 15, "split": "train"}
    model = {"hidden": 16, "heads": 2, "critic_hidden": 16}
    layout = ObsLayout.infer(8 + 3 * SLOT, 8 + 3 * SLOT + 4, 4)
    start = MaraNet(layout, ModelConfig(hidden=16, heads=2, critic_hidden=16)).state_dict()
    torch.save(start, tmp_path / "start.pt")
    rounds = {"dagger_rounds": 1, "dagger_episodes": 2, "dagger_epochs": 1}
    pretrain_cfg = {"scheduler": "uniform", "init_weights": str(tmp_path / "start.pt"), **rounds}
    exp = parse_experiment({"name": "t", "env": env, "model": model, "pretrain": pretrain_cfg})
    assert exp.pretrain.clones
    out = tmp_path / "t_pretrain.pt"
    lines: list[str] = []
    pretrain(exp, out, log=lines.append)
    assert lines[0] == f"pretrain: DAgger from {tmp_path / 'start.pt'}"
    assert not (tmp_path / "t_pretrain_bc.pt").exists()
    assert (tmp_path / "t_pretrain_dagger1.pt").is_file()
    assert any(line.startswith("dagger round 1:") for line in lines)
    after = torch.load(out, weights_only=True)
    assert any(not torch.equal(start[k], after[k]) for k in start)
    # init_weights alone is a warm start for PPO, not a cloning stage; with a teacher's
    # episodes as well it is refused
    alone = parse_experiment(
        {"name": "t", "env": env, "pretrain": {"init_weights": str(tmp_path / "start.pt")}}
    )
    assert not alone.pretrain.clones
    with pytest.raises(ConfigError, match="DAgger rounds from init_weights take episodes: 0"):
        parse_experiment({"name": "t", "env": env, "pretrain": {**pretrain_cfg, "episodes": 2}})
