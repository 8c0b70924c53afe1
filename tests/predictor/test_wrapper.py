"""Observation wrapper: layout, spaces, caching, determinism, PettingZoo API; with a
policy's plan (:mod:`mara_agents.policy.features`), the plan's columns after the
predictions."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from pettingzoo.test import api_test, seed_test, state_test

from flow_predictor.checkpoint import load_predictor
from flow_predictor.remaining import FLOW_SAMPLES, MIN_REPORTS
from flow_predictor.wls import WLSPredictor
from flow_predictor.wrapper import FLOW_DEADLINE, PREDICTION_FEATURES, PredictorFeatures
from mara_agents.planning.share_rule import confident_nodes
from mara_agents.policy.features import ADDED_FEATURES, FeatureSettings, feature_settings
from mara_env.cluster_env import CAP_SCALE, SLOT_FEATURES, env, parallel_env

torch.set_num_threads(1)
SMALL = {"num_nodes": 4, "num_slots": 3, "horizon": 20}
P = len(ADDED_FEATURES)
B = len(SLOT_FEATURES)  # the env's own slot features


@pytest.fixture(scope="module")
def flow():
    return load_predictor(n_samples=16)


def wrapped(predictor, **kw) -> PredictorFeatures:
    """The env of ``kw`` with a flow/wls policy's features: predictions, flow_share's plan."""
    settings = FeatureSettings()
    return PredictorFeatures(
        env(**{**SMALL, **kw}), predictor, settings.prediction(), settings.plan
    )


def round_starts(e, agent, seed: int):
    """Play an episode of ``e`` with ``agent`` (a ``SchedulerAgent``); at the first node of
    each round yield its observation, the simulation and the mask of occupied slots."""
    e.reset(seed=seed)
    agent.reset(e, seed)
    engine = e.unwrapped.engine
    for name in e.agent_iter():
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            e.step(None)
            continue
        if name == e.possible_agents[0]:
            yield obs, engine.sim, engine.slot_tasks >= 0
        e.step(agent.act(e, name))


def play_until_reports(e, reports: int = 3, seed: int = 0) -> None:
    """Random valid actions until a visible task has ``reports`` loss reports."""
    rng = np.random.default_rng(seed)
    engine = e.unwrapped.engine
    for _ in range(200 * SMALL["num_nodes"]):
        tasks = engine.slot_tasks[engine.slot_tasks >= 0]
        if any(len(engine.sim.hist_work[k]) >= reports for k in tasks):
            return
        obs, _, term, trunc, _ = e.last()
        assert not (term or trunc)
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    raise AssertionError("no task reported enough losses")


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


def test_nodes_needed_feature_is_the_flow_share_want():
    """The clone's teacher and the policy's feature agree: same predictions, same want."""
    from mara_agents.baselines.flow_share import FlowShare
    from mara_env.schedulers import SchedulerAgent

    # Light load: every active task is visible (the teacher predicts all active tasks).
    e = wrapped(load_predictor(n_samples=FLOW_SAMPLES), load=0.6, horizon=60)
    teacher = FlowShare()
    col = B + ADDED_FEATURES.index("pred_nodes_needed")
    checked = 0
    for obs, sim, visible in round_starts(e, SchedulerAgent(teacher), seed=5):
        tasks = e.unwrapped.engine.slot_tasks[visible]
        if len(tasks) == len(sim.active()):
            want = confident_nodes(sim, tasks, teacher._predictions.get(sim, tasks))
            slots = obs["observation"][8:].reshape(SMALL["num_slots"], -1)
            feature = slots[visible, col]
            np.testing.assert_allclose(feature, want / sim.workload.cap[tasks], rtol=1e-6)
            checked += int((want < sim.workload.cap[tasks]).sum())
    assert checked > 0  # some slot had a want below its cap


def test_share_features_let_a_node_realise_flow_share_exactly():
    """With K >= N the per-node rule "stay while your task's pred_share exceeds
    nodes_chosen, else join the first slot with share - chosen - pending > 0" takes
    exactly the flow_share teacher's actions: the clone's targets are learnable."""
    from mara_agents.baselines.flow_share import FlowShare
    from mara_env.schedulers import SchedulerAgent

    k = SMALL["num_nodes"]
    e = wrapped(load_predictor(n_samples=32), num_slots=k, load=1.5, horizon=40)
    col = {n: i for i, n in enumerate(SLOT_FEATURES + ADDED_FEATURES)}
    agent = SchedulerAgent(FlowShare())
    e.reset(seed=2)
    agent.reset(e, 2)
    steps = moved = 0
    for name in e.agent_iter():
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            e.step(None)
            continue
        slots = obs["observation"][8:].reshape(k, -1).astype(np.float64)
        cap = slots[:, col["cap"]] * CAP_SCALE
        count, chosen, pending = (
            np.rint(slots[:, col[f]] * cap) for f in ("pred_share", "nodes_chosen", "nodes_pending")
        )
        mine = np.flatnonzero(slots[:, col["is_mine"]] > 0)
        room = np.flatnonzero((slots[:, col["occupied"]] > 0) & (count - chosen - pending > 0))
        if len(mine) and count[mine[0]] > chosen[mine[0]]:
            rule = int(mine[0])
        else:
            rule = int(room[0]) if len(room) else k
            moved += len(mine) > 0
        action = agent.act(e, name)
        assert rule == action, f"{name} at tick {e.unwrapped.engine.sim.t}"
        steps += 1
        e.step(action)
    assert steps > 100 and moved > 0  # some node left its task for another


def test_flow_deadline_features_fuse_the_prior_and_share_is_the_hedge_plan():
    """The ``flow+deadline`` wrapper: every slot is predicted from arrival on (the deadline
    prior needs no report), and with every active task visible ``pred_share`` is the
    ``hedge`` scheduler's count exactly (the clone's teacher and the feature agree)."""
    from mara_agents.baselines.hedge import Hedge
    from mara_env.schedulers import SchedulerAgent

    k = SMALL["num_nodes"] * 2
    settings = feature_settings(FLOW_DEADLINE)
    assert settings.plan.hedge is not None and len(settings.deadline_prior) > 100
    e = PredictorFeatures(
        env(**{**SMALL, "num_slots": k, "load": 1.5, "horizon": 40}),
        load_predictor(n_samples=settings.samples),
        settings.prediction(),
        settings.plan,
    )
    teacher = Hedge()
    col = {n: B + i for i, n in enumerate(ADDED_FEATURES)}
    checked = 0
    for obs, sim, visible in round_starts(e, SchedulerAgent(teacher), seed=4):
        tasks = e.unwrapped.engine.slot_tasks[visible]
        slots = obs["observation"][8:].reshape(k, -1)[visible]
        assert (slots[:, col["pred_q50"]] > 0).all()  # predicted from arrival on
        if len(tasks) == len(sim.active()) and len(tasks):
            want = teacher.allocate(sim)[tasks]
            share = np.rint(slots[:, col["pred_share"]] * sim.workload.cap[tasks])
            np.testing.assert_array_equal(share, want)
            checked += 1
    assert checked > 10


def test_the_wrapper_alone_predicts_and_a_plan_only_adds_its_columns():
    """Without a plan the wrapper writes :data:`PREDICTION_FEATURES` only; a policy's plan
    adds its columns after them and changes none of the predictions."""
    alone = PredictorFeatures(env(**SMALL), WLSPredictor())
    planned = wrapped(WLSPredictor())
    assert alone.slot_dim == B + len(PREDICTION_FEATURES) == planned.slot_dim - 2
    for e in (alone, planned):
        e.reset(seed=3)
        play_until_reports(e)
    k = SMALL["num_slots"]
    a = alone.observe(alone.agent_selection)["observation"][8:].reshape(k, -1)
    p = planned.observe(planned.agent_selection)["observation"][8:].reshape(k, -1)
    np.testing.assert_array_equal(a, p[:, : a.shape[1]])
    assert (a[:, 0] == 1).any()  # some slot was occupied
