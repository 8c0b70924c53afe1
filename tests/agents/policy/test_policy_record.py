"""Policy files record the predictor checkpoint and the feature settings behind their
features, and act with those settings."""

from __future__ import annotations

import hashlib
import warnings

import pytest
import torch

from flow_predictor.checkpoint import SHIPPED_CHECKPOINT
from flow_predictor.remaining import FLOW_SAMPLES
from flow_predictor.share_rule import DEFAULTS, FlowShareParams
from mara_agents.policy.agent import MaraAgent
from mara_agents.policy.inference import load_policy
from mara_agents.policy.policy_file import SHIPPED_POLICY, PolicyFileError, save_policy


def shipped_with(tmp_path, **changes):
    """A copy of the shipped policy file with header entries changed (None: removed)."""
    data = torch.load(SHIPPED_POLICY, weights_only=True)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    out = tmp_path / "policy.pt"
    torch.save(data, out)
    return out


def test_the_shipped_policy_records_what_it_was_trained_with_and_loads_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = load_policy()
    assert policy.meta["flow_share"] == DEFAULTS.to_dict()
    digest = hashlib.sha256(SHIPPED_CHECKPOINT.read_bytes()).hexdigest()
    assert policy.meta["predictor_sha256"] == digest
    from flow_predictor.hedge_rule import DEFAULTS as HEDGE

    assert policy.features.planner == HEDGE  # MARA reads the plan the `hedge` baseline makes


def test_save_policy_writes_the_record(tmp_path):
    net = load_policy().net
    env = {"wrapper": "flow", "wrapper_options": {"n_samples": 32}}
    data = torch.load(save_policy(net, tmp_path / "p.pt", env), weights_only=True)
    assert data["flow_share"] == {"quantile": 0.9, "slack": 2, "drop": 0.05, "refresh": 0.1}
    assert data["predictor_sha256"] == hashlib.sha256(SHIPPED_CHECKPOINT.read_bytes()).hexdigest()
    assert data["flow_samples"] == 32
    bare = torch.load(save_policy(net, tmp_path / "n.pt", {}), weights_only=True)
    assert bare["flow_share"] is None and bare["predictor_sha256"] is None
    assert bare["flow_samples"] is None
    default = torch.load(
        save_policy(net, tmp_path / "d.pt", {"wrapper": "flow"}), weights_only=True
    )
    assert default["flow_samples"] == FLOW_SAMPLES  # the count wrap(env, "flow") uses


def test_the_recorded_settings_are_the_ones_acted_with(tmp_path):
    """A policy's features are computed with the settings its file records (another
    sample count, another share rule), whatever the wrapper's defaults."""
    from mara_env.cluster_env import env

    rule = {**DEFAULTS.to_dict(), "quantile": 0.8}
    path = shipped_with(tmp_path, flow_samples=64, wrapper_options={}, flow_share=rule)
    agent = MaraAgent(path)
    features = agent.policy.features
    assert (features.rule, features.samples) == (FlowShareParams(**rule), 64)
    assert agent._predictor.noise.shape[0] == 64
    aec = env(num_nodes=4, num_slots=agent.slots_for(4), horizon=6, split="val")
    aec.reset(seed=0)
    agent.reset(aec, seed=0)
    assert agent._rounds.aec.settings.rule.quantile == 0.8


def test_a_file_without_a_flow_sample_count_warns_unless_its_options_name_one(tmp_path):
    assert torch.load(SHIPPED_POLICY, weights_only=True)["flow_samples"] == FLOW_SAMPLES
    # as written before the count was recorded (when the default was 64)
    path = shipped_with(tmp_path, wrapper_options={}, flow_samples=None)
    with pytest.warns(UserWarning, match="does not record its .*'flow_samples'"):
        policy = load_policy(path)
    assert policy.features.samples == FLOW_SAMPLES


def test_another_predictor_checkpoint_is_refused(tmp_path):
    path = shipped_with(tmp_path, predictor_sha256="0" * 64)
    with pytest.raises(PolicyFileError, match="trained with predictor_sha256='0000"):
        load_policy(path)


def test_an_unreadable_recorded_checkpoint_is_refused(tmp_path):
    missing = tmp_path / "gone.pt"
    path = shipped_with(tmp_path, wrapper_options={"n_samples": 32, "path": str(missing)})
    with pytest.raises(PolicyFileError, match="its flow checkpoint cannot be read"):
        load_policy(path)


@pytest.mark.parametrize("key", ["flow_share", "predictor_sha256"])
def test_a_file_without_the_record_loads_with_a_warning(tmp_path, key):
    path = shipped_with(tmp_path, **{key: None})
    with pytest.warns(UserWarning, match=f"does not record its .*'{key}'"):
        policy = load_policy(path)
    assert policy.net.layout == load_policy().net.layout


def test_a_flow_deadline_policy_records_and_acts_with_its_prior_and_planner(tmp_path):
    """A ``flow+deadline`` policy file holds the deadline prior and hedge's knobs it was
    trained with, acts with them (not with whatever prior ships later), and a file without
    them is a one-line error naming it."""
    from flow_predictor.deadline_prior import DeadlinePrior
    from flow_predictor.hedge_rule import DEFAULTS as HEDGE

    net = load_policy().net
    env = {"wrapper": "flow+deadline", "wrapper_options": {}}
    path = save_policy(net, tmp_path / "p.pt", env)
    data = torch.load(path, weights_only=True)
    assert data["hedge"] == HEDGE.to_dict()
    assert data["deadline_prior"] == pytest.approx(DeadlinePrior.load().log_ratios.tolist())
    assert data["predictor_sha256"] == hashlib.sha256(SHIPPED_CHECKPOINT.read_bytes()).hexdigest()
    data["deadline_prior"] = [v - 1.0 for v in data["deadline_prior"]]
    torch.save(data, path)
    policy = load_policy(path)
    assert policy.features.deadline_prior[0] == pytest.approx(data["deadline_prior"][0])
    assert policy.features.planner == HEDGE
    # a file written before the planner had its own quantile count read the flow samples'
    data["hedge"].pop("quantiles")
    torch.save(data, path)
    assert load_policy(path).features.planner.quantiles == data["flow_samples"]
    data.pop("deadline_prior")
    torch.save(data, path)
    with pytest.raises(PolicyFileError) as err:
        load_policy(path)
    assert str(path) in str(err.value) and "deadline_prior" in str(err.value)
    assert "\n" not in str(err.value)
