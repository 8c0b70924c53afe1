"""Policy files record the predictor checkpoint and the feature settings behind their
features, and act with those settings."""

from __future__ import annotations

import hashlib
import warnings

import pytest
import torch

from flow_predictor.checkpoint import SHIPPED_CHECKPOINT
from flow_predictor.remaining import FLOW_SAMPLES
from mara_agents.planning.hedge_rule import HedgeParams
from mara_agents.planning.share_rule import DEFAULTS
from mara_agents.policy.agent import MaraAgent
from mara_agents.policy.features import HEDGE_TEACHER, SHARE_TEACHER, FeatureSettings
from mara_agents.policy.inference import load_policy
from mara_agents.policy.policy_file import (
    SHIPPED_POLICY,
    PolicyFileError,
    save_policy,
    teacher_of_old_header,
)


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
    # its cluster wrapper's features come from the flow checkpoint and the remaining-work
    # model: the file records both digests
    from flow_predictor.task_work import SHIPPED_TASK_WORK

    flow, task = (
        hashlib.sha256(p.read_bytes()).hexdigest() for p in (SHIPPED_CHECKPOINT, SHIPPED_TASK_WORK)
    )
    assert policy.wrapper == "cluster" and policy.meta["predictor_sha256"] == f"{flow}+{task}"
    # MARA reads the plan the `hedge` baseline makes by default, named by one spec: a miss
    # priced by the cluster's history, the default users' price recorded
    assert policy.meta["teacher"] == HEDGE_TEACHER
    # files written before the source was named "cluster" (mara_v16) record
    # miss_cost=history: it reads as today's spec
    from mara_agents.policy.policy_file import recorded_teacher

    assert recorded_teacher(HEDGE_TEACHER.replace("=cluster", "=history")) == HEDGE_TEACHER
    assert policy.features.teacher == HEDGE_TEACHER
    assert HEDGE_TEACHER == (
        "hedge:confidence=0.05:flow_spread=2.0:quantiles=256:urgency=1.0:wait=15:miss_cost=cluster"
    )
    assert policy.features.miss_cost == policy.features.plan.hedge.miss_cost == 0.1


def test_the_package_ships_one_policy_file():
    assert sorted(SHIPPED_POLICY.parent.glob("*.pt")) == [SHIPPED_POLICY]


def test_an_old_header_reads_as_the_teacher_spec_it_meant(tmp_path):
    """Files written before the ``teacher`` key record flow_share's and hedge's knobs
    under their own keys: each reads as one spec, and a knob that no spec can hold is a
    one-line error naming the file.  The old file is the shipped policy with its header
    written in that form (hedge's retired knobs at their inert values, as mara_v14, the
    shipped policy before the key, recorded it): it acts with the teacher it meant."""
    hedge = {"confidence": 0.05, "explore": 0, "tail": 0.0, "flow_spread": 2.0, "quantiles": 256}
    old = shipped_with(
        tmp_path,
        teacher=None,
        teacher_miss_cost=None,
        flow_share=DEFAULTS.to_dict(),
        hedge=hedge,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old keys name the teacher: nothing is missing
        # written while a miss was charged to the deadline (1) and urgency was off (0) by
        # default
        assert load_policy(old).features.teacher == (
            "hedge:confidence=0.05:flow_spread=2.0:quantiles=256:urgency=0.0:miss_cost=1.0"
        )
    # written before hedge had its own quantile count: the flow samples'
    older = {"flow_share": DEFAULTS.to_dict(), "hedge": {"confidence": 0.05, "tail": 0.0}}
    assert ":quantiles=32:" in teacher_of_old_header("p", older, 32)
    rule = {**DEFAULTS.to_dict(), "quantile": 0.8}
    assert teacher_of_old_header("p", {"flow_share": rule}, 32) == (
        "flow_share:quantile=0.8:slack=2:drop=0.05:refresh=0.1"
    )
    assert teacher_of_old_header("p", {}, 32) is None
    for bad, words in [
        ({"hedge": {"explore": 1}}, "explore was removed"),
        ({"hedge": {}, "flow_share": rule}, "reads the share rule's defaults"),
        ({"hedge": {"quantiles": 10**12}}, "quantiles=1000000000000"),
    ]:
        with pytest.raises(PolicyFileError, match=words) as err:
            teacher_of_old_header("p.pt", bad, 32)
        assert "p.pt" in str(err.value) and "\n" not in str(err.value)


def test_a_teacher_spec_reads_back_as_itself_and_bad_ones_are_named():
    spec = "hedge:confidence=0.1:flow_spread=1.5:quantiles=64:urgency=0.5:wait=3:miss_cost=1.0"
    settings = FeatureSettings(spec)
    assert settings.teacher == spec
    assert settings.plan.hedge == HedgeParams(0.1, 1.5, 64, 0.5, 3, miss_cost=1.0)
    assert FeatureSettings("hedge", miss_cost=0.1).teacher == HEDGE_TEACHER
    assert FeatureSettings("flow_share").teacher == SHARE_TEACHER
    for bad, words in [
        ("lara", "expected one of ['flow_share', 'hedge']"),
        ("hedge:explore=1", "'explore=1'; expected key=value"),
        ("hedge:quantiles=many", "quantiles='many'; expected a whole number"),
        ("hedge:miss_cost=history", "miss_cost='history' is renamed: write 'cluster'"),
        ("hedge:quantiles=1000000000000", "hedge: quantiles=1000000000000; expected a whole"),
    ]:
        with pytest.raises(ValueError) as err:
            FeatureSettings(bad)
        assert words in str(err.value)


def test_save_policy_writes_the_record(tmp_path):
    net = load_policy().net
    env = {"wrapper": "flow", "wrapper_options": {"n_samples": 32}}
    data = torch.load(save_policy(net, tmp_path / "p.pt", env), weights_only=True)
    assert data["teacher"] == "flow_share:quantile=0.9:slack=2:drop=0.05:refresh=0.1"
    assert "flow_share" not in data and "hedge" not in data
    assert data["predictor_sha256"] == hashlib.sha256(SHIPPED_CHECKPOINT.read_bytes()).hexdigest()
    assert data["flow_samples"] == 32
    bare = torch.load(save_policy(net, tmp_path / "n.pt", {}), weights_only=True)
    assert bare["teacher"] is None and bare["predictor_sha256"] is None
    assert bare["flow_samples"] is None
    default = torch.load(
        save_policy(net, tmp_path / "d.pt", {"wrapper": "flow"}), weights_only=True
    )
    assert default["flow_samples"] == FLOW_SAMPLES  # the count wrap(env, "flow") uses


def test_the_recorded_settings_are_the_ones_acted_with(tmp_path):
    """A policy's features are computed with the settings its file records (another
    sample count, another teacher), whatever the wrapper's defaults."""
    from mara_env.cluster_env import env

    teacher = "hedge:confidence=0.1:flow_spread=2.0:quantiles=128"
    path = shipped_with(
        tmp_path, flow_samples=64, wrapper_options={}, teacher=teacher, teacher_miss_cost=None
    )
    agent = MaraAgent(path)
    features = agent.policy.features
    # recorded before miss_cost had the cluster's price as its default (it meant 1), and
    # while urgency was off by default
    assert (features.teacher, features.samples) == (f"{teacher}:urgency=0.0:miss_cost=1.0", 64)
    assert agent._predictor.noise.shape[0] == 64
    aec = env(num_nodes=4, num_slots=agent.slots_for(4), horizon=6, split="val")
    aec.reset(seed=0)
    agent.reset(aec, seed=0)
    assert agent._rounds.aec.plan.hedge.confidence == 0.1
    assert agent._rounds.aec.settings.quantiles == 128  # the teacher's, fusing the prior


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
    with pytest.raises(PolicyFileError, match="its predictor.s checkpoint cannot be read"):
        load_policy(path)


def test_a_file_without_the_record_loads_with_a_warning(tmp_path):
    path = shipped_with(tmp_path, predictor_sha256=None)
    with pytest.warns(UserWarning, match="does not record its .*'predictor_sha256'"):
        policy = load_policy(path)
    assert policy.net.layout == load_policy().net.layout


def test_a_flow_deadline_policy_records_and_acts_with_its_prior_and_planner(tmp_path):
    """A ``flow+deadline`` policy file holds the deadline prior and hedge's knobs it was
    trained with, acts with them (not with whatever prior ships later), and a file without
    them is a one-line error naming it."""
    from flow_predictor.deadline_prior import DeadlinePrior

    net = load_policy().net
    env = {"wrapper": "flow+deadline", "wrapper_options": {}}
    path = save_policy(net, tmp_path / "p.pt", env)
    data = torch.load(path, weights_only=True)
    assert data["teacher"] == HEDGE_TEACHER
    assert data["deadline_prior"] == pytest.approx(DeadlinePrior.load().log_ratios.tolist())
    assert data["predictor_sha256"] == hashlib.sha256(SHIPPED_CHECKPOINT.read_bytes()).hexdigest()
    data["deadline_prior"] = [v - 1.0 for v in data["deadline_prior"]]
    torch.save(data, path)
    policy = load_policy(path)
    assert policy.features.deadline_prior[0] == pytest.approx(data["deadline_prior"][0])
    assert policy.features.teacher == HEDGE_TEACHER
    data.pop("teacher")  # and none of the keys that recorded it before
    torch.save(data, path)
    with pytest.raises(PolicyFileError, match="needs the 'teacher'"):
        load_policy(path)
    data.pop("deadline_prior")
    torch.save(data, path)
    with pytest.raises(PolicyFileError) as err:
        load_policy(path)
    assert str(path) in str(err.value) and "deadline_prior" in str(err.value)
    assert "\n" not in str(err.value)


def test_on_other_users_the_policy_reads_that_clusters_own_history_prior():
    """Where the cluster's users are those it was trained among (whatever its size or
    load), the policy acts with its recorded prior; under another deadline model, with
    the prior of that cluster's own history, as hedge plans on."""
    from mara_agents.planning.history import ClusterHistory
    from mara_env.config import ClusterConfig

    agent = MaraAgent()
    recorded = agent.policy.features
    assert agent._features_on(ClusterConfig(num_nodes=64, load=2.0)) is recorded
    blind = ClusterConfig(deadline_model="blind")
    features = agent._features_on(blind)
    prior = ClusterHistory.of(blind).prior
    assert features.deadline_prior == pytest.approx(prior.log_ratios.tolist())
    assert features.deadline_prior != recorded.deadline_prior
    assert features.teacher == recorded.teacher and features.samples == recorded.samples
    assert agent._features_on(blind.replace(load=1.5)) is features  # built once


def test_a_policy_trained_among_other_users_records_their_history_prior(tmp_path):
    """Trained on a cluster of other settings with no prior file named, the features read
    (and the file records) that cluster's own history prior, the one its labeler plans on."""
    from mara_agents.planning.history import ClusterHistory
    from mara_env.config import ClusterConfig

    blind = {"deadline_model": "blind"}
    env = {"wrapper": "flow+deadline", "wrapper_options": {}, "cluster": blind}
    path = save_policy(load_policy().net, tmp_path / "p.pt", env)
    data = torch.load(path, weights_only=True)
    history = ClusterHistory.of(ClusterConfig(**blind)).prior
    assert data["deadline_prior"] == pytest.approx(history.log_ratios.tolist())
    agent = MaraAgent(path)  # acting among those users: what it recorded
    assert agent._features_on(ClusterConfig(**blind, num_nodes=32)) is agent.policy.features


def test_a_teacher_that_prices_misses_by_history_records_and_follows_each_clusters_price(
    tmp_path,
):
    """A ``flow+deadline`` policy whose teacher's ``miss_cost`` is ``cluster`` records the
    price it was trained with (``teacher_miss_cost``), acts with it among those users and
    with each other cluster's own price elsewhere; a file that lost it is refused."""
    from mara_agents.planning.history import ClusterHistory
    from mara_env.config import ClusterConfig

    teacher = HEDGE_TEACHER
    with pytest.raises(ValueError, match="expected the cluster's price exactly when"):
        FeatureSettings(teacher)
    settings = FeatureSettings(teacher, miss_cost=0.1)
    assert settings.teacher == teacher and settings.plan.hedge.miss_cost == 0.1
    options = {"teacher": teacher}
    path = save_policy(
        load_policy().net,
        tmp_path / "p.pt",
        {"wrapper": "flow+deadline", "wrapper_options": options},
    )
    data = torch.load(path, weights_only=True)
    assert data["teacher"] == teacher
    assert data["teacher_miss_cost"] == ClusterHistory.of(ClusterConfig()).price() == 0.1
    agent = MaraAgent(path)
    assert agent.policy.features.plan.hedge.miss_cost == 0.1
    unbiased = agent._features_on(ClusterConfig(deadline_model="unbiased"))
    assert unbiased.teacher == teacher and unbiased.plan.hedge.miss_cost == 1.0
    data.pop("teacher_miss_cost")
    torch.save(data, path)
    with pytest.raises(PolicyFileError, match="does not record the price it was trained with"):
        load_policy(path)
    # the same when the spec names its price before other knobs
    data["teacher"] = "hedge:miss_cost=cluster:confidence=0.05"
    torch.save(data, path)
    with pytest.raises(PolicyFileError, match="does not record the price it was trained with"):
        load_policy(path)
