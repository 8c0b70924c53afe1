"""Observation wrapper: layout, spaces, caching, determinism, PettingZoo API (the plan's
columns after the predictions: tests/agents/policy/test_features.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from pettingzoo.test import api_test, seed_test, state_test

from flow_predictor.checkpoint import load_predictor
from flow_predictor.remaining import FLOW_SAMPLES, MIN_REPORTS
from flow_predictor.wls import WLSPredictor
from flow_predictor.wrapper import PredictorFeatures
from mara_agents.policy.features import ADDED_FEATURES
from mara_env.cluster_env import SLOT_FEATURES, env, parallel_env
from tests.conftest import WRAPPED_SMALL, play_until_reports, wrapped

torch.set_num_threads(1)
SMALL = WRAPPED_SMALL
P = len(ADDED_FEATURES)
B = len(SLOT_FEATURES)  # the env's own slot features


@pytest.fixture(scope="module")
def flow():
    return load_predictor(n_samples=16)


def test_api_test_with_shipped_flow(flow):
    api_test(wrapped(flow), num_cycles=60)


def test_seed_test_with_shipped_flow(flow):
    seed_test(functools.partial(wrapped, flow), num_cycles=60)


def test_state_test_with_wls_features():
    """The wrapper's state_space is its own (wider than the env's), as state_test checks."""
    e = wrapped(WLSPredictor())
    state_test(e, parallel_env(**SMALL), num_cycles=60)
    assert e.state_space.shape == e.observation_space("node_0")["state"].shape


@pytest.mark.parametrize("kind", ["flow", "wls"])
def test_layout_extends_every_slot_and_keeps_queue(flow, kind):
    pred = flow if kind == "flow" else WLSPredictor()
    e = wrapped(pred, load=3.0)
    e.reset(seed=3)
    play_until_reports(e)
    agent = e.agent_selection
    base = e.env.observe(agent)
    obs = e.observe(agent)
    k, d = e.num_slots, e.node_dim
    assert (d, e.slot_dim) == (8, B + P)
    assert obs["observation"].shape == (d + k * (B + P),)
    assert e.observation_space(agent) is e.observation_space(agent)
    assert e.observation_space(agent).contains(obs)
    slots = obs["observation"][d:].reshape(k, B + P)
    np.testing.assert_array_equal(obs["observation"][:d], base["observation"][:d])
    np.testing.assert_array_equal(slots[:, :B], base["observation"][d:].reshape(k, B))
    np.testing.assert_array_equal(obs["state"][-4:], base["state"][-4:])
    np.testing.assert_array_equal(obs["action_mask"], base["action_mask"])
    occupied = slots[:, 0] == 1
    assert np.all(slots[~occupied, B:] == 0)
    fb = B + ADDED_FEATURES.index("pred_fallback")
    assert (slots[occupied, fb] == 0).any()  # some task is predicted by the method itself
    need = slots[occupied, B + ADDED_FEATURES.index("pred_nodes_needed")]
    assert np.all((need > 0) & (need <= 1))
    assert np.all(need[slots[occupied, fb] == 1] == 1)  # no confident prediction: the cap
    q = slots[occupied, B : B + 3]
    assert np.all(np.diff(q, axis=1) >= 0)
    np.testing.assert_array_equal(e.state(), obs["state"])


def test_every_predictor_feature_is_its_definition(flow):
    """The per-tick path computes the features in one pass; each equals its definition
    (module docstring) recomputed from the cached predictions, bit for bit."""
    from flow_predictor.wrapper import LOG_TICKS_SCALE, QUANTILES
    from mara_agents.planning.share_rule import flow_share_counts
    from mara_env.cluster_env import OBS_LIMIT

    e = wrapped(flow, load=3.0, num_nodes=8, num_slots=8)
    e.reset(seed=5)
    checked = 0
    rng = np.random.default_rng(5)
    for _ in range(8 * 40):
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            break
        engine = e.unwrapped.engine
        sim, wl = engine.sim, engine.sim.workload
        tasks = engine.slot_tasks[engine.slot_tasks >= 0]
        if engine.agents.index(e.agent_selection) == 0 and len(tasks):
            rw = e._predictions.get(sim, tasks)  # cached: the same predictions
            ref = wl.rate[tasks] * np.minimum(wl.cap[tasks], 4) ** wl.alpha[tasks]
            left = wl.deadline[tasks] - sim.t
            now = wl.rate[tasks] * sim.nodes_now[tasks] ** wl.alpha[tasks] * left
            cap = wl.rate[tasks] * wl.cap[tasks] ** wl.alpha[tasks] * np.maximum(left - 1, 0)
            want, share = flow_share_counts(sim, tasks, rw)
            with np.errstate(over="ignore", invalid="ignore"):
                qs = np.log1p(rw.quantiles(QUANTILES) / ref[:, None]) / LOG_TICKS_SCALE
            expect = np.zeros((len(tasks), P), np.float32)
            expect[:, :3] = qs
            expect[:, 3] = rw.prob_within(now)
            expect[:, 4] = rw.prob_within(cap)
            expect[:, 5] = rw.fallback
            expect[:, 6] = want / wl.cap[tasks]
            expect[:, 7] = share / wl.cap[tasks]
            slots = obs["observation"][e.node_dim :].reshape(e.num_slots, B + P)
            # unknown (nan) as 0, the rest within the env's bounds
            clipped = np.clip(np.nan_to_num(expect, nan=0.0), -OBS_LIMIT, OBS_LIMIT)
            np.testing.assert_array_equal(slots[: len(tasks), B:], clipped)
            checked += int((~rw.fallback).sum())
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    assert checked > 20  # many flow predictions (not only fallbacks) were compared


class CountingPredictor(WLSPredictor):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def predict(self, works, losses, targets):
        self.calls.append(len(works))
        return super().predict(works, losses, targets)


def test_predictions_are_cached_until_a_task_reports():
    pred = CountingPredictor()
    e = wrapped(pred, load=3.0)
    e.reset(seed=1)
    play_until_reports(e)
    engine = e.unwrapped.engine
    before = len(pred.calls)
    for agent in e.possible_agents:  # many observations in one round: at most one call
        e.observe(agent)
    e.state()
    assert len(pred.calls) - before <= 1
    visible = set(engine.slot_tasks[engine.slot_tasks >= 0].tolist())
    before = len(pred.calls)
    for _ in range(SMALL["num_nodes"]):  # everyone idles: nobody reports a new loss
        e.step(SMALL["num_slots"])
    e.observe(e.agent_selection)
    new = set(engine.slot_tasks[engine.slot_tasks >= 0].tolist()) - visible
    # a newly visible task costs one call if it has reports enough to be predicted
    predictable = [k for k in new if len(engine.sim.hist_work[k]) >= MIN_REPORTS]
    assert sum(pred.calls[before:]) == len(predictable)


def test_prediction_cache_refreshes_on_report_growth_and_shifts_by_work_done():
    from types import SimpleNamespace

    from flow_predictor.remaining import PredictionCache

    pred = CountingPredictor()
    sim = SimpleNamespace(
        hist_work=[[1.0, 2.0, 3.0, 4.0]],
        hist_loss=[[1.0, 0.8, 0.7, 0.6]],
        work=np.array([4.0]),
        workload=SimpleNamespace(target=np.array([0.3])),
    )
    cache = PredictionCache(pred, refresh=0.5)
    first = cache.get(sim, np.array([0])).samples[0, 0]
    assert np.isfinite(first) and len(pred.calls) == 1
    sim.hist_work[0].append(5.0)
    sim.hist_loss[0].append(0.55)
    sim.work[0] = 5.0
    # One more report is less than half of four: no new call, the old answer minus 1 work.
    assert cache.get(sim, np.array([0])).samples[0, 0] == pytest.approx(max(first - 1, 0.05))
    assert len(pred.calls) == 1
    sim.hist_work[0].append(6.0)
    sim.hist_loss[0].append(0.5)
    sim.work[0] = 6.0
    cache.get(sim, np.array([0]))
    assert len(pred.calls) == 2  # grown by two reports: predicted again
    with pytest.raises(ValueError, match="refresh must be >= 0"):
        PredictionCache(pred, refresh=-1)


def test_one_flow_sample_count_for_the_wrapper_and_flow_share(monkeypatch):
    """PredictorFeatures' default, ``wrap(env, "flow")`` and flow_share load the flow model
    with the same sample count (FLOW_SAMPLES), unless the wrapper options name one."""
    import flow_predictor.checkpoint
    from flow_predictor.wrapper import make_predictor
    from mara_agents.baselines.flow_share import FlowShare
    from mara_agents.policy.features import wrap

    asked: list[int] = []

    def fake_load(path=None, **kwargs):
        asked.append(kwargs["n_samples"])
        return WLSPredictor()  # a predictor the wrapper accepts; only the count matters

    monkeypatch.setattr(flow_predictor.checkpoint, "load_predictor", fake_load)
    PredictorFeatures(env(**SMALL))
    wrap(env(**SMALL), "flow")
    FlowShare(predictor="flow").reset(None, np.random.default_rng(0))
    assert asked == [FLOW_SAMPLES] * 3
    make_predictor("flow", {"n_samples": 8})
    assert asked[-1] == 8
