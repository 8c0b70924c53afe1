"""The scheduler variants of `benchmarks/flow_share_study.py --study room` are what they say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mara_agents.evaluation.registry import make_scheduler
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import edf_order, run_episode
from mara_env.traces import load_traces
from tests.conftest import load_script

pytest.importorskip("torch")

study = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "flow_share_study.py")


@pytest.fixture
def setup(small_config):
    config = ClusterConfig.from_dict({**small_config, "num_nodes": 6, "horizon": 30})
    return config, load_traces(config.traces, split=config.split)


def test_unchanged_variant_is_flow_share(setup) -> None:
    config, traces = setup
    for seed in (3, 4):
        a = run_episode(study.FlowShareVariant(), config, traces, seed, record=True)
        b = run_episode(make_scheduler("flow_share"), config, traces, seed, record=True)
        np.testing.assert_array_equal(a.pop("allocation"), b.pop("allocation"))
        assert a == b


def test_deadline_informed_samples(setup) -> None:
    config, traces = setup
    variant = study.FlowShareVariant(deadline=True)
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(5))
    variant.reset(sim, np.random.default_rng(0))
    checked = 0
    while not sim.done and checked < 20:
        order = edf_order(sim)
        if len(order):
            plain = variant._predictions.inner.get(sim, order)
            informed = variant._predictions.get(sim, order)
            assert informed.samples.shape == plain.samples.shape
            np.testing.assert_array_equal(informed.fallback, plain.fallback)
            rows = ~plain.fallback
            np.testing.assert_array_equal(informed.samples[~rows], plain.samples[~rows])
            s = informed.samples[rows]
            assert (np.diff(s, axis=1) >= 0).all() and (s >= 0).all()  # sorted quantiles
            checked += int(rows.sum())
        sim.tick(variant.assign(sim))
    assert checked > 0
    # the residual density comes from the train split and is a proper, peaked curve
    grid, dens = study.DeadlineInformed.density()
    assert dens.max() == pytest.approx(1.0) and dens[0] < 0.01 and dens[-1] < 0.01
