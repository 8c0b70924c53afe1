"""Baseline schedulers: the LARA planner on hand-made instances, and episode behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from flow_predictor.wls import fit_power_law
from flow_predictor.wrapper import confident_nodes
from mara_agents.baselines import ALL_SCHEDULERS, FlowShare, plan_allocation, ticks_needed
from mara_env.cluster import ClusterSim
from mara_env.cluster_env import _cached_traces
from mara_env.config import ClusterConfig
from mara_env.schedulers import SCHEDULERS, Uniform, edf_order, nodes_needed, run_episode


def plan(remaining, time_left, cap, warm=None, num_nodes=4, **kw):
    k = len(remaining)
    return plan_allocation(
        np.asarray(remaining, float),
        np.asarray(time_left, np.int64),
        np.asarray(cap, np.int64),
        np.ones(k),  # rate: one unit of work per tick on one node
        np.ones(k),  # alpha = 1: linear speed-up, so node-ticks are easy to count
        np.asarray(warm if warm is not None else [0] * k, np.int64),
        num_nodes,
        **kw,
    )


def test_ticks_needed_counts_warm_up() -> None:
    one = np.ones(1)
    assert ticks_needed(np.array([4.0]), np.array([1]), np.array([1]), one, one)[0] == 4
    # A cold node gives nothing in its first tick.
    assert ticks_needed(np.array([4.0]), np.array([1]), np.array([0]), one, one)[0] == 5
    # 1 warm + 1 joining: 1 unit in the first tick, then 2 per tick.
    assert ticks_needed(np.array([5.0]), np.array([2]), np.array([1]), one, one)[0] == 3
    # Even zero remaining work needs one tick of progress to report.
    assert ticks_needed(np.array([0.0]), np.array([1]), np.array([1]), one, one)[0] == 1


def test_planner_drops_the_task_that_blocks_the_other() -> None:
    # 4 nodes, both deadlines in 5 ticks: A needs all 4 nodes warm (16 work), B needs 2.
    # Only one fits at once; keeping B and dropping A keeps one, and B is cheaper.
    p = plan([16.0, 8.0], [5, 5], [4, 4], warm=[4, 2])
    assert p.kept.tolist() == [False, True]
    assert p.target_nodes.tolist() == [4, 2]
    assert p.counts[1] >= 2 and p.counts.sum() == 4  # leftovers still used


def test_planner_drops_individually_infeasible_task() -> None:
    p = plan([100.0, 3.0], [5, 5], [4, 4], warm=[4, 1])
    assert p.kept.tolist() == [False, True]
    assert p.target_nodes[0] == 0


def test_planner_serves_earliest_deadline_first_when_nodes_are_short() -> None:
    # Both kept (plenty of node-ticks overall) but only 2 nodes free this tick.
    p = plan([4.0, 4.0], [5, 9], [2, 2], warm=[0, 0], num_nodes=4, capacity=2)
    assert p.kept.all()
    assert p.counts.tolist()[0] >= 1 and p.counts.sum() == 2
    assert p.counts[0] >= p.counts[1]


def test_planner_keeps_warm_nodes_with_spare_capacity() -> None:
    p = plan([2.0, 2.0], [10, 10], [4, 4], warm=[3, 1], num_nodes=4)
    assert p.counts.tolist() == [3, 1]  # n* is 1 each; spare nodes stay where they are


def test_planner_respects_caps_and_cluster_size() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 8))
        p = plan(
            rng.uniform(0, 30, k),
            rng.integers(1, 12, k),
            cap := rng.integers(1, 5, k),
            warm=np.minimum(rng.integers(0, 4, k), cap),
            num_nodes=6,
        )
        assert (p.counts <= cap).all() and p.counts.sum() <= 6 and (p.counts >= 0).all()


def test_wls_fit_recovers_power_law() -> None:
    rng = np.random.default_rng(1)
    w = np.linspace(10, 1000, 60)
    loss = 3.0 * w**-0.5 * np.exp(rng.normal(0, 0.02, len(w)))
    fit = fit_power_law([w], [loss], discount=1.0, ridge=0.0)
    assert fit.b[0] == pytest.approx(0.5, abs=0.03)
    assert np.exp(fit.log_a[0]) == pytest.approx(3.0, rel=0.15)


def test_registry_extends_env_schedulers() -> None:
    assert set(SCHEDULERS) <= set(ALL_SCHEDULERS)
    assert {"lara", "oracle", "least_slack"} <= set(ALL_SCHEDULERS)


@pytest.fixture
def episode_setup(small_config):
    cfg = ClusterConfig.from_dict({**small_config, "num_nodes": 8, "horizon": 40, "load": 1.5})
    return cfg, _cached_traces(cfg.traces, cfg.split, cfg.families)


@pytest.mark.parametrize("name", sorted(ALL_SCHEDULERS))
def test_every_scheduler_runs_valid_episodes(name, episode_setup) -> None:
    cfg, traces = episode_setup
    m = run_episode(ALL_SCHEDULERS[name](), cfg, traces, seed=3)
    assert 0.0 <= m["completion_rate"] <= 1.0
    again = run_episode(ALL_SCHEDULERS[name](), cfg, traces, seed=3)
    assert m == again  # deterministic given the seed


def test_oracle_beats_lara_beats_random_on_average(episode_setup) -> None:
    cfg, traces = episode_setup
    rate = {
        name: np.mean(
            [
                run_episode(ALL_SCHEDULERS[name](), cfg, traces, s)["completion_rate"]
                for s in range(8)
            ]
        )
        for name in ("oracle", "lara", "random")
    }
    assert rate["oracle"] >= rate["lara"] >= rate["random"]


def test_nodes_needed_is_the_fewest_that_meet_the_deadline() -> None:
    one = np.ones(4)
    need = nodes_needed(
        np.array([4.0, 9.0, 100.0, np.inf]),
        np.array([5, 5, 5, 5]),
        np.array([4, 4, 4, 4]),
        np.array([1, 0, 4, 0]),  # warm nodes: the first task is already served by one
        one,
        one,
    )
    # 4 work on 1 warm node: 4 ticks; 9 work cold: 3 nodes give 0 + 3 + 3 + 3 = 9 in 4 ticks.
    assert need.tolist() == [1, 3, 0, 0]  # 0: no count within the cap (or unknown work)


def test_flow_share_moves_unneeded_nodes_to_other_tasks(episode_setup) -> None:
    cfg, traces = episode_setup
    sched = FlowShare(predictor="wls", drop=0)
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(4))
    sched.reset(sim, np.random.default_rng(0))
    order = want = np.zeros(0, np.int64)
    while not (want < sim.workload.cap[order]).any():  # until some task needs less than its cap
        sim.tick(Uniform().assign(sim))
        order = edf_order(sim)
        want = confident_nodes(sim, order, sched._predictions.get(sim, order))
    counts = sched.allocate(sim)[order]
    assert np.all(counts <= sim.workload.cap[order]) and counts.sum() <= cfg.num_nodes
    # Uniform share up to the wants first: while any task is below its want, none is above.
    assert not ((counts < want).any() and (counts > want).any())
    # The nodes it does not need go to others: as many nodes in use as under uniform share.
    assert counts.sum() == Uniform().allocate(sim).sum()
    # Without confident predictions (every prefix too short) it is exactly uniform share.
    fresh = ClusterSim(cfg, traces)
    fresh.reset(np.random.default_rng(4))
    sched.reset(fresh, np.random.default_rng(0))
    while not len(fresh.active()):
        fresh.tick(np.full(cfg.num_nodes, -1))
    np.testing.assert_array_equal(sched.allocate(fresh), Uniform().allocate(fresh))


def test_flow_share_rejects_an_unknown_predictor() -> None:
    with pytest.raises(ValueError, match="expected 'flow', 'wls' or 'oracle'"):
        FlowShare(predictor="gp")
    with pytest.raises(ValueError, match="drop=1.5"):
        FlowShare(drop=1.5)


def test_flow_share_oracle_plans_on_true_work_after_the_same_exploration(episode_setup) -> None:
    from flow_predictor.remaining import MIN_REPORTS
    from flow_predictor.wrapper import SAFE_SLACK, _nodes_to_finish, flow_share_counts

    cfg, traces = episode_setup
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(4))
    sched = FlowShare(predictor="oracle")
    sched.reset(sim, np.random.default_rng(0))
    seen_known = seen_new = False
    while not sim.done:
        order = edf_order(sim)
        if len(order):
            rw = sched._predictions.get(sim, order)
            reports = np.array([len(sim.hist_work[k]) for k in order])
            np.testing.assert_array_equal(rw.fallback, reports < MIN_REPORTS)
            known = ~rw.fallback
            np.testing.assert_array_equal(rw.samples[known, 0], sim.remaining_true(order[known]))
            # its want is the true work's node count (the cap where none is enough)
            need = _nodes_to_finish(sim, order, sim.remaining_true(order), SAFE_SLACK)
            expect = np.where(known & (need > 0), need, sim.workload.cap[order])
            want, _ = flow_share_counts(sim, order, rw)
            np.testing.assert_array_equal(want, expect)
            seen_known |= bool(known.any())
            seen_new |= bool((~known).any())
        sim.tick(sched.assign(sim))
    assert seen_known and seen_new


def test_flow_share_serves_hopeless_tasks_last_only_when_overloaded(episode_setup) -> None:
    from flow_predictor.remaining import RemainingWork
    from flow_predictor.wrapper import flow_share_counts

    cfg, traces = episode_setup
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(4))
    # until the tasks after the most urgent one can take every node between them
    while sim.workload.cap[edf_order(sim)[1:]].sum() < cfg.num_nodes:
        assert not sim.done
        sim.tick(Uniform().assign(sim))
    order = edf_order(sim)
    n = len(order)
    hopeless = np.zeros(n, bool)
    hopeless[0] = True  # the most urgent task: its work is never done ("not reached")

    def counts(others: np.ndarray, drop: float | None = 0.05) -> tuple[np.ndarray, np.ndarray]:
        samples = np.where(hopeless[:, None], np.inf, others[None, :])
        want, share = flow_share_counts(
            sim, order, RemainingWork(samples, np.zeros(n, bool)), drop=drop
        )
        assert (share <= sim.workload.cap[order]).all() and share.sum() <= cfg.num_nodes
        return want, share

    # The others can finish (5 % quantile tiny) but want their caps (90 % quantile huge),
    # and their caps take every node: the hopeless task is served last, i.e. not at all.
    wide = np.r_[np.full(4, 1e-3), np.full(28, 1e6)]
    want, share = counts(wide)
    assert want[~hopeless].sum() >= cfg.num_nodes
    assert share[0] == 0 and share.sum() == cfg.num_nodes
    # Without the triage it gets its round-robin share like everyone else.
    assert counts(wide, drop=None)[1][0] >= 1
    # The others need little: no overload, so no triage either.
    want, share = counts(np.full(32, 1e-3))
    assert want[~hopeless].sum() < cfg.num_nodes and share[0] >= 1
