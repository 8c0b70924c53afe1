"""The workload generator: deadlines come from a user's estimate of the size, by a named model."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.config import ClusterConfig, ConfigError
from mara_env.traces import load_traces
from mara_env.workload import _draw_sizes, sample_workload, user_estimate


def _log_size_and_window(config: ClusterConfig, episodes: int) -> tuple[np.ndarray, np.ndarray]:
    traces = load_traces(split=config.split)
    size, window = [], []
    for seed in range(episodes):
        wl = sample_workload(config, traces, np.random.default_rng(seed))
        size.append(np.log(wl.size))
        window.append(np.log(wl.deadline - wl.arrival))
    return np.concatenate(size), np.concatenate(window)


def test_deadline_does_not_pin_the_task_size():
    # With sigma = 0.5 the correlation of log size and log window is about 0.7 (slack adds
    # its own spread); without the estimate error it is about 0.95.
    unbiased = ClusterConfig(split="val", deadline_model="unbiased")
    size, window = _log_size_and_window(unbiased, episodes=20)
    assert np.corrcoef(size, window)[0, 1] <= 0.75
    exact_size, exact_window = _log_size_and_window(unbiased.replace(deadline_sigma=0.0), 20)
    assert np.corrcoef(exact_size, exact_window)[0, 1] >= 0.9


def test_sigma_changes_only_the_deadlines():
    traces = load_traces(split="val")
    unbiased = ClusterConfig(split="val", deadline_model="unbiased")
    a = sample_workload(unbiased, traces, np.random.default_rng(3))
    b = sample_workload(unbiased.replace(deadline_sigma=0.0), traces, np.random.default_rng(3))
    for field in ("arrival", "target", "trace", "cap", "alpha", "rate", "size", "work_true"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.deadline, b.deadline)
    assert (a.deadline > a.arrival).all()


@pytest.mark.parametrize("model", ["padded", "unbiased", "blind"])
def test_the_deadline_model_changes_only_the_deadlines(model):
    traces = load_traces(split="val")
    a = sample_workload(ClusterConfig(split="val"), traces, np.random.default_rng(3))
    b = sample_workload(
        ClusterConfig(split="val", deadline_model=model), traces, np.random.default_rng(3)
    )
    for field in ("arrival", "target", "trace", "cap", "alpha", "rate", "size", "work_true"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert (b.deadline > b.arrival).all()


def _estimates(config: ClusterConfig, n: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    size = _draw_sizes(config, rng, n)
    return size, user_estimate(config, size, rng, lambda m: _draw_sizes(config, rng, m))


def test_padded_estimates_look_like_published_logs():
    # shared/USER_ESTIMATES.md: median padding 1.4-37x, log spread 1.1-1.9, 10-50 % at the
    # queue's maximum, 0.1-12 % below the runtime, R^2 of log runtime on log estimate 0-0.66
    config = ClusterConfig()
    size, estimate = _estimates(config)
    log_ratio = np.log(estimate / size)
    assert 3.0 <= np.exp(np.median(log_ratio)) <= 4.5
    assert 0.9 <= log_ratio.std() <= 1.3
    assert 0.2 <= np.mean(estimate == config.estimate_menu[-1]) <= 0.3
    assert 0.08 <= np.mean(estimate < size) <= 0.15
    assert set(np.unique(estimate)) <= set(config.estimate_menu)
    assert np.corrcoef(np.log(size), np.log(estimate))[0, 1] ** 2 <= 0.3


def test_unbiased_estimates_are_env_v2s():
    size, estimate = _estimates(ClusterConfig(deadline_model="unbiased"))
    log_ratio = np.log(estimate / size)
    assert abs(np.median(log_ratio)) <= 0.03
    assert abs(log_ratio.std() - 0.5) <= 0.02
    assert abs(np.mean(estimate < size) - 0.5) <= 0.02


def test_blind_estimates_say_nothing_of_the_task():
    size, estimate = _estimates(ClusterConfig(deadline_model="blind"))
    assert abs(np.corrcoef(np.log(size), np.log(estimate))[0, 1]) <= 0.03


@pytest.mark.parametrize("jobs", [None, "philly"])
def test_blind_deadlines_have_the_unbiased_distribution(jobs):
    traces = load_traces(split="val")

    def windows(model: str) -> np.ndarray:
        config = ClusterConfig(split="val", deadline_model=model, jobs=jobs)
        wls = [sample_workload(config, traces, np.random.default_rng(s)) for s in range(40)]
        return np.concatenate([w.deadline - w.arrival for w in wls]).astype(float)

    blind, unbiased = windows("blind"), windows("unbiased")
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]
    np.testing.assert_allclose(
        np.quantile(np.log(blind), levels), np.quantile(np.log(unbiased), levels), atol=0.15
    )


@pytest.mark.parametrize("model", ["padded", "unbiased", "blind"])
@pytest.mark.parametrize("jobs", [None, "philly"])
def test_same_seed_same_episode(model, jobs):
    traces = load_traces(split="val")
    config = ClusterConfig(split="val", deadline_model=model, jobs=jobs)
    a, b = (sample_workload(config, traces, np.random.default_rng(11)) for _ in range(2))
    for field in ("arrival", "deadline", "target", "size", "cap"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@pytest.mark.parametrize(
    "jobs, pinned",
    [(None, (57, 4576, [10, 38, 18, 24, 28, 24, 33, 87])), ("philly", (112, 6289, [4, 3, 6, 9]))],
)
def test_env_v2s_episodes_are_unchanged(jobs, pinned):
    # pinned with env v2's generator (commit 941aa5d), val split, seed 5
    traces = load_traces(split="val")
    config = ClusterConfig(split="val", deadline_model="unbiased", jobs=jobs)
    wl = sample_workload(config, traces, np.random.default_rng(5))
    n, total, first = pinned
    assert (len(wl), int(wl.deadline.sum())) == (n, total)
    assert wl.deadline[: len(first)].tolist() == first


def test_the_v2_id_keeps_its_deadlines():
    import pettingzoo

    import mara_env  # noqa: F401 (registers the ids)

    v2 = pettingzoo.make("aec", "mara/ComputeCluster-v2", num_nodes=4)
    v3 = pettingzoo.make("aec", "mara/ComputeCluster-v3", num_nodes=4)
    assert v2.unwrapped.config.deadline_model == "unbiased"
    assert v3.unwrapped.config.deadline_model == "padded"
    given = pettingzoo.make("aec", "mara/ComputeCluster-v2", deadline_model="blind")
    assert given.unwrapped.config.deadline_model == "blind"


@pytest.mark.parametrize(
    "key, bad",
    [
        ("deadline_model", "optimistic"),
        ("estimate_padding", 0.0),
        ("estimate_spread", -1.0),
        ("estimate_top_share", 1.5),
        ("estimate_menu", (4.0, 2.0)),
        ("estimate_menu", ()),
        ("slack_range", (0.0, 1.0)),
    ],
)
def test_bad_deadline_settings_are_refused(key, bad):
    with pytest.raises(ConfigError, match=key):
        ClusterConfig(**{key: bad})


@pytest.mark.parametrize("bad", [-0.1, 3.5, "wide", True])
def test_bad_deadline_sigma_is_refused(bad):
    with pytest.raises(ConfigError, match="deadline_sigma"):
        ClusterConfig(deadline_sigma=bad)
