"""The workload generator: deadlines come from a user's rough estimate, not the true size."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.config import ClusterConfig, ConfigError
from mara_env.traces import load_traces
from mara_env.workload import sample_workload


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
    size, window = _log_size_and_window(ClusterConfig(split="val"), episodes=20)
    assert np.corrcoef(size, window)[0, 1] <= 0.75
    exact_size, exact_window = _log_size_and_window(
        ClusterConfig(split="val", deadline_sigma=0.0), episodes=20
    )
    assert np.corrcoef(exact_size, exact_window)[0, 1] >= 0.9


def test_sigma_changes_only_the_deadlines():
    traces = load_traces(split="val")
    a = sample_workload(ClusterConfig(split="val"), traces, np.random.default_rng(3))
    b = sample_workload(
        ClusterConfig(split="val", deadline_sigma=0.0), traces, np.random.default_rng(3)
    )
    for field in ("arrival", "target", "trace", "cap", "alpha", "rate", "size", "work_true"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.deadline, b.deadline)
    assert (a.deadline > a.arrival).all()


@pytest.mark.parametrize("bad", [-0.1, 3.5, "wide", True])
def test_bad_deadline_sigma_is_refused(bad):
    with pytest.raises(ConfigError, match="deadline_sigma"):
        ClusterConfig(deadline_sigma=bad)
