"""A policy's plan columns (:mod:`mara_agents.policy.features`): each is its teacher
scheduler's plan, read from the teacher spec, after the predictor wrapper's predictions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flow_predictor.checkpoint import load_predictor
from flow_predictor.remaining import FLOW_SAMPLES
from flow_predictor.wls import WLSPredictor
from flow_predictor.wrapper import (
    CLUSTER_CHOICE,
    FLOW_DEADLINE,
    PREDICTION_FEATURES,
    TASK,
    PredictorFeatures,
)
from mara_agents.planning.share_rule import confident_nodes
from mara_agents.policy.features import ADDED_FEATURES, feature_settings
from mara_env.cluster_env import CAP_SCALE, SLOT_FEATURES, env
from tests.conftest import WRAPPED_SMALL, play_until_reports, wrapped

torch.set_num_threads(1)
SMALL = WRAPPED_SMALL
B = len(SLOT_FEATURES)  # the env's own slot features


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


@pytest.mark.parametrize(
    "wrapper, teacher, spec, jobs",
    [
        (TASK, None, "hedge:predictor=task", None),
        (CLUSTER_CHOICE, None, "hedge", None),
        (CLUSTER_CHOICE, None, "hedge", "philly"),
        (FLOW_DEADLINE, None, "hedge:predictor=flow+deadline", None),
        (FLOW_DEADLINE, "hedge:miss_cost=1", "hedge:predictor=flow+deadline:miss_cost=1", None),
        (CLUSTER_CHOICE, "hedge:light=0.9", "hedge:light=0.9", None),
    ],
    ids=[
        "task: hedge on the calibrated model",
        "cluster: the default teacher, hedge's own, synthetic",
        "cluster: the default teacher, hedge's own, Philly's days",
        "flow+deadline: hedge on the fused prior",
        "flow+deadline: a miss charged to the deadline",
        "cluster: earliest deadline first while the observed load is light",
    ],
)
def test_prior_features_predict_from_arrival_and_share_is_the_hedge_plan(
    wrapper, teacher, spec, jobs
):
    """The ``task``, ``cluster`` and ``flow+deadline`` wrappers: every slot is predicted
    from arrival on (the deadline prior needs no report), and with every active task
    visible ``pred_share`` is the count of the ``hedge`` scheduler that plans on the same
    predictions with the knobs its teacher spec names, exactly (the clone's teacher and the
    feature agree; ``cluster``: on the distribution the history chose for the workload)."""
    from mara_agents.evaluation.registry import make_scheduler
    from mara_agents.planning.history import ClusterHistory
    from mara_env.config import ClusterConfig
    from mara_env.schedulers import SchedulerAgent

    k = SMALL["num_nodes"] * 2
    options = None if teacher is None else {"teacher": teacher}
    settings = feature_settings(wrapper, options, jobs=jobs)
    assert settings.plan.hedge is not None and len(settings.deadline_prior) > 100
    chosen = ClusterHistory.of(ClusterConfig(jobs=jobs)).distribution()
    assert settings.task_work == (wrapper == TASK or (wrapper == CLUSTER_CHOICE and chosen == TASK))
    e = PredictorFeatures(
        env(**{**SMALL, "num_slots": k, "load": 1.5, "horizon": 40, "jobs": jobs}),
        load_predictor(n_samples=settings.samples),
        settings.prediction(),
        settings.plan,
    )
    teacher = make_scheduler(spec)
    col = {n: B + i for i, n in enumerate(ADDED_FEATURES)}
    checked, modes = 0, set()
    for obs, sim, visible in round_starts(e, SchedulerAgent(teacher), seed=4):
        tasks = e.unwrapped.engine.slot_tasks[visible]
        slots = obs["observation"][8:].reshape(k, -1)[visible]
        assert (slots[:, col["pred_q50"]] > 0).all()  # predicted from arrival on
        if len(tasks) == len(sim.active()) and len(tasks):
            want = teacher.allocate(sim)[tasks]
            share = np.rint(slots[:, col["pred_share"]] * sim.workload.cap[tasks])
            np.testing.assert_array_equal(share, want)
            checked += 1
            load = teacher.observed_load(sim)
            modes.add(load is not None and load < teacher.planned.light)
    assert checked > 10
    assert modes == ({False, True} if teacher.planned.light else {False})  # both, if light


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
