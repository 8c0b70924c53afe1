"""The throughput model schedulers see: the truth, or estimates from what tasks did."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig, ConfigError
from mara_env.schedulers import EDF, Uniform, run_episode
from mara_env.throughput import ThroughputModel
from mara_env.traces import load_traces


@pytest.fixture(scope="module")
def traces():
    return load_traces(split="val")


def test_fit_recovers_rate_and_alpha_from_two_allocations():
    model = ThroughputModel(np.array([0, 0, 1]), alpha_prior=0.8)
    rate, alpha = np.array([3.0, 0.5, 2.0]), np.array([0.7, 0.95, 0.6])
    for n in (2, 4, 4, 8):
        nodes = np.full(2, n)
        model.observe(np.array([0, 1]), nodes, rate[:2] * nodes ** alpha[:2])
    got_rate, got_alpha = model.rates()
    np.testing.assert_allclose(got_rate[:2], rate[:2], rtol=1e-9)
    np.testing.assert_allclose(got_alpha[:2], alpha[:2], rtol=1e-9)
    # task 2 (group 1) was never seen: no task of its group either -> all observed tasks
    assert got_alpha[2] == 0.8
    assert got_rate[2] == pytest.approx(np.exp(np.log(rate[:2]).mean()))


def test_one_allocation_uses_the_prior_alpha_and_unseen_tasks_their_groups_rate():
    model = ThroughputModel(np.array([0, 0, 1, 1]), alpha_prior=0.5, rate_prior=7.0)
    rate, alpha = model.rates()
    np.testing.assert_allclose(rate, 7.0)
    assert (alpha == 0.5).all()
    model.observe(np.array([0, 2]), np.array([4, 4]), np.array([8.0, 2.0]))
    rate, alpha = model.rates()
    np.testing.assert_allclose(rate, [4.0, 4.0, 1.0, 1.0])  # 8 / 4**0.5, 2 / 4**0.5
    assert (alpha == 0.5).all()


def test_bad_priors_are_named():
    with pytest.raises(ValueError, match="alpha_prior"):
        ThroughputModel(np.zeros(2, int), alpha_prior=1.5)
    with pytest.raises(ValueError, match="rate_prior"):
        ThroughputModel(np.zeros(2, int), alpha_prior=0.5, rate_prior=0.0)


def test_config_names_the_throughput_modes():
    with pytest.raises(ConfigError, match=r"throughput='guess'.*'known', 'measured'"):
        ClusterConfig(throughput="guess")


def test_measured_mode_hides_the_truth_until_tasks_have_run(traces):
    config = ClusterConfig(load=1.5, split="val", throughput="measured")
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(3))
    truth = sim.truth
    assert sim.workload is not truth
    assert not np.allclose(sim.workload.rate, truth.rate)
    scheduler = Uniform()
    scheduler.reset(sim, np.random.default_rng(0))
    seen_at: dict[int, set[int]] = {}
    while not sim.done:
        assign = scheduler.assign(sim)
        warm = np.bincount(assign[(assign >= 0) & (assign == sim.node_task)], minlength=len(truth))
        for k in np.flatnonzero(warm):
            seen_at.setdefault(int(k), set()).add(int(warm[k]))
        sim.tick(assign)
    twice = [k for k, ns in seen_at.items() if len(ns) >= 2]
    once = [k for k, ns in seen_at.items() if len(ns) == 1]
    assert twice and once
    np.testing.assert_allclose(sim.workload.rate[twice], truth.rate[twice], rtol=1e-6)
    np.testing.assert_allclose(sim.workload.alpha[twice], truth.alpha[twice], rtol=1e-6)
    np.testing.assert_allclose(sim.workload.alpha[once], np.mean(config.alpha_range))
    # the deadlines, targets and caps schedulers see are the truth
    for name in ("arrival", "deadline", "target", "cap"):
        assert getattr(sim.workload, name) is getattr(truth, name)


def test_measured_mode_changes_nothing_for_a_scheduler_that_ignores_throughput(traces):
    known = ClusterConfig(load=1.0, split="val")
    measured = known.replace(throughput="measured")
    for seed in (0, 1):
        a = run_episode(EDF(), known, traces, seed)
        b = run_episode(EDF(), measured, traces, seed)
        assert a == b


def test_a_per_task_prior_stands_in_for_unseen_tasks():
    model = ThroughputModel(np.array([0, 0]), alpha_prior=0.5, rate_prior=np.array([3.0, 5.0]))
    model.observe(np.array([0]), np.array([4]), np.array([8.0]))
    rate, _ = model.rates()
    np.testing.assert_allclose(rate, [4.0, 5.0])
    with pytest.raises(ValueError, match="one number per task"):
        ThroughputModel(np.array([0, 0]), alpha_prior=0.5, rate_prior=np.ones(3))
