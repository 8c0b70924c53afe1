"""Baseline schedulers: the LARA planner on hand-made instances, and episode behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from flow_predictor.wls import fit_power_law
from mara_agents.baselines import ALL_SCHEDULERS
from mara_agents.baselines.lara import plan_allocation
from mara_env.config import ClusterConfig
from mara_env.engine import _cached_traces
from mara_env.schedulers import SCHEDULERS, run_episode, ticks_needed


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


def test_one_prediction_cache_serves_wls_optimus_and_flow_share(episode_setup, monkeypatch):
    """LARA's WorkPredictor, Optimus and flow_share all keep their predictions in
    :class:`flow_predictor.remaining.PredictionCache` (one rule for refreshing them)."""
    from flow_predictor.remaining import PredictionCache

    calls: list[str] = []
    for method in ("totals", "get"):
        original = getattr(PredictionCache, method)

        def counted(self, sim, tasks, _original=original, _method=method):
            calls.append(_method)
            return _original(self, sim, tasks)

        monkeypatch.setattr(PredictionCache, method, counted)
    cfg, traces = episode_setup
    for spec, method in [("lara", "totals"), ("optimus", "totals"), ("flow_share", "get")]:
        calls.clear()
        kwargs = {"predictor": "wls"} if spec == "flow_share" else {}
        run_episode(ALL_SCHEDULERS[spec](**kwargs), cfg, traces, seed=3)
        assert method in calls, spec


def test_prediction_cache_every_fallbacks_and_totals():
    """``every``: new reports before a task is predicted again; ``refit_fallbacks=False``:
    a fallback waits as long; ``totals``: samples plus the work they count from."""
    from types import SimpleNamespace

    from flow_predictor.remaining import PredictionCache, RemainingWork

    predicted: list[list[int]] = []

    def predict(sim, tasks):
        predicted.append(tasks.tolist())
        fallback = np.array([len(sim.hist_work[k]) < 3 for k in tasks])
        return RemainingWork(np.full((len(tasks), 2), 10.0), fallback), sim.work[tasks]

    sim = SimpleNamespace(hist_work=[[1.0], [1.0, 2.0, 3.0]], work=np.array([1.0, 3.0]))
    for refit_fallbacks, expected in [(True, [[0, 1], [0], [0, 1]]), (False, [[0, 1], [0, 1]])]:
        predicted.clear()
        cache = PredictionCache(predict, every=2, refit_fallbacks=refit_fallbacks)
        np.testing.assert_array_equal(cache.totals(sim, np.array([0, 1])), [[11, 11], [13, 13]])
        for _ in range(2):  # two reports each: task 1 (and with refits the fallback) again
            for k in (0, 1):
                sim.hist_work[k].append(sim.hist_work[k][-1] + 1)
            cache.totals(sim, np.array([0, 1]))
        assert predicted == expected
        sim.hist_work = [[1.0], [1.0, 2.0, 3.0]]
    with pytest.raises(ValueError, match="every must be >= 1"):
        PredictionCache(predict, every=0)


def test_planned_work_by_predictor(episode_setup) -> None:
    """What LARA's and ElasticFlow's planners believe: exact work for the oracle, the
    flow model's median for flow, LARA's fit for wls, each scaled by 1 + margin."""
    from mara_agents.baselines.lara import PlannedWork
    from mara_env.cluster import ClusterSim

    cfg, traces = episode_setup
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(2))
    uniform = ALL_SCHEDULERS["uniform"]()
    uniform.reset(sim, np.random.default_rng(0))
    while len(sim.active()) < 2 or min(len(sim.hist_work[k]) for k in sim.active()) < 6:
        sim.tick(uniform.assign(sim))
    tasks = sim.active()
    exact = PlannedWork("exact", 0.0, 0)
    exact.reset()
    assert np.allclose(exact.remaining(sim, tasks), sim.remaining_true(tasks))
    half = PlannedWork("exact", -0.5, 0)
    total = sim.work[tasks] + sim.remaining_true(tasks)
    assert np.allclose(half.remaining(sim, tasks), np.maximum(0.5 * total - sim.work[tasks], 0))
    for name in ("wls", "flow"):
        work = PlannedWork(name, 0.0, 3)
        work.reset()
        got = work.remaining(sim, tasks)
        assert got.shape == tasks.shape and (got >= 0).all() and np.isfinite(got).any()
    with pytest.raises(ValueError, match="predictor='median'; expected one of wls, flow"):
        PlannedWork("median", 0.0, 3)
    with pytest.raises(ValueError, match="margin=-1.5; expected a number > -1"):
        PlannedWork("wls", -1.5, 3)


def test_lara_on_the_flow_predictor(episode_setup) -> None:
    """``lara:predictor=flow`` explores until the flow model can predict (3 reports), plans
    on its median, and refuses an exploration its predictor cannot use."""
    from mara_agents.baselines.lara import LARA
    from mara_agents.evaluation.registry import SpecError, make_scheduler

    cfg, traces = episode_setup
    lara = make_scheduler("lara:predictor=flow")
    assert isinstance(lara, LARA) and lara.explore_reports == 3 and lara.work.margin == -0.6
    m = run_episode(lara, cfg, traces, seed=3)
    assert m == run_episode(make_scheduler("lara:predictor=flow"), cfg, traces, seed=3)
    assert m != run_episode(make_scheduler("lara"), cfg, traces, seed=3)
    with pytest.raises(SpecError, match="explore_reports=1; predictor 'flow' needs at least 3"):
        make_scheduler("lara:predictor=flow:explore_reports=1")
