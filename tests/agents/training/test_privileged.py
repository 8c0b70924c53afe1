"""The privileged critic: its columns are the simulator's truth, the actor never sees them,
the YAML key is checked, and a policy file records none of them."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from flow_predictor.wrapper import LOG_TICKS_SCALE
from mara_agents.policy.network import MaraNet, ModelConfig
from mara_agents.training.experiment import load_experiment
from mara_agents.training.privileged import (
    ARRIVAL_TICKS,
    CRITIC_QUEUE,
    CRITIC_SLOTS,
    PRIVILEGED_FEATURES,
)
from mara_env.config import ConfigError
from mara_env.engine import OBS_LIMIT
from mara_env.workload import reference_nodes
from tests.agents.training.test_train import smoke_yaml, train_one_round_batch

PRIVILEGED = {"privileged": list(PRIVILEGED_FEATURES)}


def privileged_smoke(tmp_path: Path, **changes: object) -> Path:
    """The smoke experiment in the round view with every privileged column (and
    ``changes`` to its top-level keys)."""
    path = smoke_yaml(tmp_path)
    data = yaml.safe_load(path.read_text())
    data.update({"view": "round", "critic": PRIVILEGED, **changes})
    path.write_text(yaml.safe_dump(data))
    return path


def round_envs(tmp_path: Path) -> tuple[object, object]:
    """A plain round env and a privileged one of the same experiment."""
    from mara_agents.training.rllib_env import round_env_creator

    config = load_experiment(privileged_smoke(tmp_path)).env_config()
    plain = {k: v for k, v in config.items() if k != "privileged"}
    return round_env_creator(plain), round_env_creator(config)


def test_the_actor_observation_is_unchanged(tmp_path: Path) -> None:
    """Same seed and actions: every entry the actor reads is byte-identical; the privileged
    env only adds the critic's two entries."""
    plain, privileged = round_envs(tmp_path)
    assert set(privileged.observation_space.spaces) - set(plain.observation_space.spaces) == {
        CRITIC_SLOTS,
        CRITIC_QUEUE,
    }
    rng = np.random.default_rng(0)
    a, _ = plain.reset(seed=3)
    b, _ = privileged.reset(seed=3)
    for _ in range(10):
        for key, value in a.items():
            assert value.dtype == b[key].dtype and value.tobytes() == b[key].tobytes(), key
        action = rng.integers(0, plain.action_space.nvec)
        a, *_ = plain.step(action)
        b, *_ = privileged.step(action)


def test_the_critic_reads_the_exact_remaining_work_and_arrivals(tmp_path: Path) -> None:
    """After a tick, each visible slot's remaining_work is the simulator's exact remaining
    work in reference ticks (log1p, halved), empty slots 0, a target never reached the
    limit; arrivals_ahead is the load of the next ticks' arrivals."""
    _, env = round_envs(tmp_path)
    env.reset(seed=5)
    sim = env.engine.sim
    for _ in range(20):  # every node on slot 0, until a visible task has progressed
        obs, *_ = env.step(np.zeros(env.action_space.shape, np.int64))
        tasks = env.engine.slot_tasks
        visible = tasks[tasks >= 0]
        if len(visible) and sim.work[visible].min() > 0:
            break
    assert len(visible) and sim.work[visible].min() > 0
    wl = sim.workload
    ref = wl.rate[visible] * reference_nodes(wl, sim.config, visible) ** wl.alpha[visible]
    truth = sim.truth.work_true[visible] - sim.work[visible]
    got = obs[CRITIC_SLOTS][:, 0]
    np.testing.assert_allclose(np.expm1(got[: len(visible)] * LOG_TICKS_SCALE) * ref, truth, 1e-5)
    assert (got[len(visible) :] == 0).all()

    ahead = (sim.truth.arrival > sim.t) & (sim.truth.arrival <= sim.t + ARRIVAL_TICKS)
    t = sim.truth
    n_ref = reference_nodes(t, sim.config, np.flatnonzero(ahead))
    size = t.work_true[ahead] / (t.rate[ahead] * n_ref ** t.alpha[ahead])
    load = (size * n_ref).sum() / (sim.config.num_nodes * ARRIVAL_TICKS)
    assert obs[CRITIC_QUEUE][0] == pytest.approx(min(load, OBS_LIMIT), rel=1e-6)

    sim.truth.work_true[visible[0]] = np.inf  # a trace that never reaches its target
    assert env.observe()[CRITIC_SLOTS][0, 0] == OBS_LIMIT


@pytest.mark.parametrize(
    "critic, view, words",
    [
        ({"privileged": ["exact_work"]}, "round", ["critic.privileged=['exact_work']", "among"]),
        ({"privileged": "remaining_work"}, "round", ["critic.privileged='remaining_work'"]),
        (
            {"privileged": ["remaining_work", "remaining_work"]},
            "round",
            ["critic.privileged", "distinct"],
        ),
        ({"privilege": ["remaining_work"]}, "round", ["critic: unknown key(s) ['privilege']"]),
        (PRIVILEGED, "node", ["critic.privileged=", "view='node'", "expected view 'round'"]),
    ],
)
def test_bad_critic_values_are_refused_naming_the_key(
    tmp_path: Path, critic: dict, view: str, words: list[str]
) -> None:
    path = privileged_smoke(tmp_path, view=view)
    data = yaml.safe_load(path.read_text())
    data["critic"] = critic
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_experiment(path)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_a_warm_start_values_as_before_until_trained_and_exports_without_privileged() -> None:
    """A privileged critic warm-started from a plain network values every state as that
    one does whatever its privileged columns (their weights start at 0);
    without_privileged gives the plain network back."""
    from mara_agents.policy.network import ObsLayout

    torch.manual_seed(0)
    layout = ObsLayout(8, 13, 3, 4)
    config = ModelConfig(hidden=16, heads=2, critic_hidden=16)
    plain = MaraNet(layout, config)
    net = MaraNet(layout, config, privileged=(1, 1))
    net.warm_start(plain.state_dict())
    state = torch.rand(5, layout.obs_dim + 4)
    columns = (torch.rand(5, 3, 1), torch.rand(5, 1))
    torch.testing.assert_close(net.value(state, columns), plain.value(state))
    with pytest.raises(ValueError, match="privileged columns"):
        net.value(state)
    back = net.without_privileged()
    assert back.privileged == (0, 0)
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(back.state_dict()[key], value)


def test_privileged_smoke_trains_and_its_policy_file_records_no_privileged_input(
    tmp_path: Path,
) -> None:
    """One PPO iteration of the smoke experiment with the privileged critic: the critic's
    privileged weights move; the exported file's header and weights are those of a policy
    trained without the switch, and it acts on an env without privileged columns."""

    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import save_policy
    from mara_agents.training.export import export_checkpoint
    from mara_agents.training.rl_module import round_layout

    path = privileged_smoke(tmp_path)
    result = train_one_round_batch(path, tmp_path)
    exp = load_experiment(path)
    import pickle

    from ray.rllib.core import DEFAULT_MODULE_ID

    module = next(Path(result.checkpoint.path).rglob(f"{DEFAULT_MODULE_ID}/module_state.pkl"))
    weights = pickle.loads(module.read_bytes())
    critic_slot = np.asarray(weights["net.critic_slot.0.weight"])
    assert critic_slot.shape[1] == 13 + 1 and np.abs(critic_slot[:, -1]).sum() > 0

    exported = export_checkpoint(result.checkpoint.path, tmp_path / "p.pt")
    plain_env, _ = round_envs(tmp_path)
    layout = round_layout(plain_env.observation_space)
    config = {k: v for k, v in exp.env_config().items() if k != "privileged"}
    reference = save_policy(MaraNet(layout, ModelConfig(**exp.model)), tmp_path / "r.pt", config)
    got, want = (torch.load(p, weights_only=True) for p in (exported, reference))
    header = [k for k in want if k not in ("state_dict", "source")]
    assert set(got) == set(want) and {k: got[k] for k in header} == {k: want[k] for k in header}
    assert got["layout"] == asdict(layout)
    assert {k: v.shape for k, v in got["state_dict"].items()} == {
        k: v.shape for k, v in want["state_dict"].items()
    }

    policy = load_policy(exported)
    obs, _ = plain_env.reset(seed=0)
    for _ in range(5):
        obs, *_ = plain_env.step(policy.act_round(obs))
