"""LaiRA (mara_agents.baselines.laira): its filter and its decisions on hand-built episodes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from mara_agents.baselines import ALL_SCHEDULERS
from mara_agents.baselines.laira import LaiRA, pace_remaining
from mara_agents.evaluation.registry import SpecError, make_scheduler
from mara_agents.evaluation.runner import run_spec
from mara_env.cluster import DONE, ClusterSim
from mara_env.config import ClusterConfig
from mara_env.engine import _cached_traces
from mara_env.schedulers import Uniform, place, run_episode, ticks_needed
from mara_env.traces import TraceSet, validate_traces
from mara_env.workload import Workload

# Knobs spelled out, so that re-tuning the defaults does not move these decisions.
KNOBS = {"process_noise": 0.01, "obs_noise": 0.05, "ucb": 1.0}
A, B = 0, 1


def power_law_sim(
    slopes: list[float],
    work: list[float],
    deadline: list[int],
    cap: list[int],
    num_nodes: int = 4,
    rate: float = 1.0,
    steps: int = 400,
) -> ClusterSim:
    """A simulator whose task ``k`` follows ``loss = w**-slopes[k]`` exactly (logged at every
    whole work unit), needs ``work[k]`` and arrives at tick 0; linear speed-up."""
    s = np.arange(1, steps + 1, dtype=float) * rate
    frame = pd.concat(
        pd.DataFrame(
            {"trace_id": f"t{i}", "family": "f", "source": f"s{i}", "step": s, "loss": s**-b}
        )
        for i, b in enumerate(slopes)
    )
    n = len(slopes)
    w = np.asarray(work, float)
    workload = Workload(
        arrival=np.zeros(n, np.int64),
        deadline=np.asarray(deadline, np.int64),
        target=w ** -np.asarray(slopes),
        trace=np.arange(n),
        cap=np.asarray(cap, np.int64),
        alpha=np.ones(n),
        rate=np.full(n, rate),
        size=w,
        work_sampled=w,
        work_true=w,
    )
    sim = ClusterSim(
        ClusterConfig(num_nodes=num_nodes), TraceSet.from_frame(validate_traces(frame))
    )
    sim.reset(np.random.default_rng(0), workload=workload)
    return sim


def run_fixed(sim: ClusterSim, assign: list[int], ticks: int) -> None:
    """Serve ``ticks`` ticks with the same per-node assignment (reports pile up)."""
    for _ in range(ticks):
        sim.tick(np.asarray(assign))


def laira_on(sim: ClusterSim, **kw) -> LaiRA:
    """A LaiRA that has just caught up with every report of ``sim`` (it re-plans now)."""
    s = LaiRA(**{**KNOBS, "slice_ticks": 1, **kw})
    s.reset(sim, np.random.default_rng(0))
    return s


def counts_per_tick(sim: ClusterSim, s: LaiRA, ticks: int) -> list[tuple[int, ...]]:
    """LaiRA's counts for the first ``ticks`` ticks, running the episode to its end."""
    s.reset(sim, np.random.default_rng(0))
    out = []
    while not sim.done:
        counts = s.allocate(sim)
        out.append(tuple(int(c) for c in counts))
        sim.tick(place(sim, counts))
    return out[:ticks]


def test_kalman_filter_converges_to_a_noiseless_power_law() -> None:
    # loss = w**-0.5 on one node of rate 10; the target needs work 10_000.
    sim = power_law_sim([0.5], [10_000], [5_000], [1], num_nodes=1, rate=10.0, steps=2_000)
    s = laira_on(sim)
    slope_var, ahead_var, slopes = [], [], []
    for _ in range(41):  # tick 0 warms the node up: 40 reports
        s.allocate(sim)
        if sim.hist_work[0]:
            slopes.append(s.filter.slope[0])
            slope_var.append(s.filter.cov[0, 1, 1])
            ahead_var.append(s.filter.forecast(np.array([0]), np.array([1.0]))[1][0, 0])
        sim.tick(np.array([0]))
    s.allocate(sim)
    assert len(sim.hist_work[0]) == 40
    assert s.filter.slope[0] == pytest.approx(0.5, abs=0.005)
    assert abs(slopes[2] - 0.5) > abs(slopes[-1] - 0.5)
    # Its variance shrinks from the prior's, and so does the look-ahead forecast's.
    assert slope_var[-1] < slope_var[0] / 100 and slope_var[-1] < slope_var[5]
    assert ahead_var[-1] < ahead_var[1] / 10
    # The mean forecast (ucb=0) finds the true remaining work, the UCB a little less.
    remaining = 10_000 - sim.work[0]
    mean = s.filter.remaining(sim, np.array([0]), 0.0)[0]
    assert mean == pytest.approx(remaining, rel=0.03)
    assert 0.8 * remaining < s.filter.remaining(sim, np.array([0]), 1.0)[0] < mean


def test_pace_estimator_extrapolates_the_recent_slope() -> None:
    sim = power_law_sim([0.5], [400], [100], [1], num_nodes=1)
    run_fixed(sim, [-1], 1)
    assert np.isnan(pace_remaining(sim, np.array([0]), 0.9)[0])  # no report: no pace
    run_fixed(sim, [0], 11)  # reports at work 1..10
    assert pace_remaining(sim, np.array([0]), 0.9)[0] == pytest.approx(390, rel=1e-6)


def test_laira_stops_exploring_a_task_whose_ucb_is_dominated() -> None:
    # Four nodes. A (steep, deadline 26) needs 2 of them soon; B (shallower, needs 200
    # work by tick 66) needs 3 at once once its curve is known: both do not fit.
    def after(ticks: int) -> tuple[ClusterSim, LaiRA, np.ndarray]:
        sim = power_law_sim([0.5, 0.3], [45, 200], [26, 66], [4, 4])
        run_fixed(sim, [A, A, B, B], ticks)
        s = laira_on(sim)
        return sim, s, s.allocate(sim)

    # Two reports: B's forecast is still wide, its UCB is cheap enough to serve both.
    sim, s, counts = after(3)
    assert counts[B] > 0 and counts.sum() == 4
    # Five reports: B's UCB alone could still make its deadline on its cap ...
    sim, s, counts = after(6)
    work = s.filter.remaining(sim, np.array([B]), s.ucb)
    ticks = ticks_needed(work, np.array([4]), np.array([2]), np.ones(1), np.ones(1))
    assert ticks[0] <= sim.workload.deadline[B] - sim.t
    # ... but it would block A, whose prospects are better: B gets nothing, A all.
    assert counts.tolist() == [4, 0]


def test_lookahead_check_drops_a_task_that_cannot_meet_its_deadline() -> None:
    # B needs 200 work by tick 30: with its slope known, even its UCB cannot make it.
    def after(ticks: int, cap_a: int) -> tuple[ClusterSim, LaiRA, np.ndarray]:
        sim = power_law_sim([0.5, 0.3], [45, 200], [26, 30], [cap_a, 4])
        run_fixed(sim, [A, A, B, B], ticks)
        s = laira_on(sim)
        return sim, s, s.allocate(sim)

    sim, s, counts = after(6, cap_a=4)
    work = s.filter.remaining(sim, np.array([B]), s.ucb)
    ticks = ticks_needed(work, np.array([4]), np.array([2]), np.ones(1), np.ones(1))
    assert ticks[0] > sim.workload.deadline[B] - sim.t
    assert counts.tolist() == [4, 0]
    assert Uniform().allocate(sim)[B] == 2  # uniform share would have kept serving it
    # Dropped means served last, not never: nodes that A cannot take still go to B.
    assert after(6, cap_a=2)[2].tolist() == [2, 2]


def test_time_slice_keeps_an_allocation_a_move_would_not_pay_for() -> None:
    # A (deadline 22) is on track on its 2 nodes; B becomes hopeless at tick 3.  Re-planning
    # every tick moves B's nodes to A at once (2 warm-up node-ticks that save no deadline);
    # an 8-tick slice keeps them until the slice ends.
    def run(slice_ticks: int) -> tuple[list[tuple[int, ...]], ClusterSim]:
        sim = power_law_sim([0.5, 0.3], [30, 200], [22, 30], [4, 4])
        return counts_per_tick(sim, LaiRA(**KNOBS, slice_ticks=slice_ticks), 9), sim

    every_tick, sim1 = run(1)
    sliced, sim8 = run(8)
    assert every_tick[3:9] == [(4, 0)] * 6
    assert sliced[:8] == [(2, 2)] * 8 and sliced[8] == (4, 0)
    assert sim1.status[A] == sim8.status[A] == DONE  # holding cost A nothing


def test_time_slice_ends_early_when_a_move_saves_a_deadline() -> None:
    # A's deadline (18) is tight: on its 2 nodes it would miss it, so the slice planned at
    # tick 0 ends at tick 3 and A gets every node.
    sim = power_law_sim([0.5, 0.3], [45, 200], [18, 30], [4, 4])
    s = LaiRA(**KNOBS, slice_ticks=8)
    counts = counts_per_tick(sim, s, 5)
    assert counts[:3] == [(2, 2)] * 3 and counts[3:5] == [(4, 0)] * 2
    assert sim.status[A] == DONE


def test_time_slice_ends_for_a_new_task() -> None:
    # Every node is busy when C arrives: the slice ends so that C gets its exploration share.
    sim = power_law_sim([0.5, 0.3, 0.5], [30, 200, 30], [22, 30, 40], [4, 4, 4])
    arrival = sim.workload.arrival.copy()
    arrival[2] = 4
    sim.reset(np.random.default_rng(0), workload=dataclasses.replace(sim.workload, arrival=arrival))
    counts = counts_per_tick(sim, LaiRA(**KNOBS, slice_ticks=8), 5)
    assert counts[3] == (2, 2, 0) and counts[4][2] > 0


@pytest.fixture
def episode_setup(small_config):
    cfg = ClusterConfig.from_dict({**small_config, "num_nodes": 8, "horizon": 40, "load": 1.5})
    return cfg, _cached_traces(cfg.traces, cfg.split, cfg.families)


def test_whole_episodes_are_valid_and_deterministic(episode_setup) -> None:
    cfg, traces = episode_setup
    assert ALL_SCHEDULERS["laira"] is LaiRA
    for seed in range(3):
        m = run_episode(LaiRA(), cfg, traces, seed=seed, record=True)
        again = run_episode(LaiRA(), cfg, traces, seed=seed, record=True)
        assert np.array_equal(m.pop("allocation"), again.pop("allocation")) and m == again
        assert m["tasks"] > 0 and 0.0 <= m["completion_rate"] <= 1.0
        assert m == run_spec("laira", cfg, traces, seed)


def test_through_the_env_it_is_the_fast_path(small_config) -> None:
    # With as many slots as tasks can be active, driving LaiRA node by node is exact.
    cfg = ClusterConfig.from_dict({**small_config, "num_nodes": 6, "num_slots": 16})
    traces = _cached_traces(cfg.traces, cfg.split, cfg.families)
    for seed in range(2):
        assert run_spec("env=laira", cfg, traces, seed) == run_spec("laira", cfg, traces, seed)


def test_spec_knobs_and_bad_values() -> None:
    s = make_scheduler("laira:process_noise=0.2:obs_noise=0.1:ucb=3:slice_ticks=2")
    assert (s.filter.q, s.filter.r, s.ucb, s.slice_ticks) == pytest.approx((0.04, 0.01, 3, 2))
    for bad in ("process_noise=0", "obs_noise=-1", "slice_ticks=0", "slice_ticks=1.5"):
        with pytest.raises(SpecError, match=bad.split("=")[0]):
            make_scheduler(f"laira:{bad}")
