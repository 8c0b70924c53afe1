"""The clairvoyant bound: hand-built episodes with a known optimum, and real episodes that
no scheduler beats."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math

import numpy as np
import pytest

from mara_agents.baselines import ALL_SCHEDULERS
from mara_agents.evaluation import bound
from mara_agents.evaluation.bound import (
    episode_bound,
    episode_workload,
    run_bound_episode,
    workload_bound,
)
from mara_agents.evaluation.registry import make_scheduler
from mara_agents.evaluation.stats import METRICS
from mara_env.cluster import ACTIVE, ClusterSim
from mara_env.config import ClusterConfig
from mara_env.engine import _cached_traces
from mara_env.schedulers import place, run_episode
from mara_env.traces import TraceSet
from mara_env.workload import Workload
from tests.conftest import SMALL


def tasks(arrival, deadline, work, cap, alpha=1.0, rate=1.0) -> Workload:
    """Hand-built tasks (alpha, rate: one value for all, or one per task)."""
    n = len(arrival)

    def per_task(v, dtype=np.float64) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype), (n,)).copy()

    return Workload(
        arrival=per_task(arrival, np.int64),
        deadline=per_task(deadline, np.int64),
        target=np.zeros(n),
        trace=np.zeros(n, np.int64),
        cap=per_task(cap, np.int64),
        alpha=per_task(alpha),
        rate=per_task(rate),
        size=np.ones(n),
        work_sampled=per_task(work),
        work_true=per_task(work),
    )


def solved(wl: Workload, num_nodes: int, **kw) -> float:
    """The bound of ``wl``, checked to be proven optimal and consistent."""
    r = workload_bound(wl, num_nodes, **kw)
    assert r.status == "optimal" and r.gap == 0.0
    assert r.best_found == r.completed_bound == r.completes.sum()
    assert not (r.completes & ~r.candidates).any()
    return r.completed_bound


def test_two_tasks_that_cannot_both_finish() -> None:
    # Each needs both nodes in all 4 ticks of its window (1 cold + 3 warm ticks of 2 work).
    wl = tasks([0, 0], [4, 4], [6.0, 6.0], cap=2)
    assert solved(wl, 2) == 1
    assert solved(wl, 4) == 2


def test_warm_up_is_accounted() -> None:
    # 4 work each, 2 nodes, 4 ticks: one after the other they fit without warm-up only.
    wl = tasks([0, 0], [4, 4], [4.0, 4.0], cap=2)
    assert solved(wl, 2) == 1
    assert solved(wl, 2, reassign_cost=False) == 2
    # Alone: 2 ticks at 4 nodes give 8 work only if the first is not spent warming up.
    assert solved(tasks([0], [2], [8.0], cap=4), 4) == 0
    assert solved(tasks([0], [3], [8.0], cap=4), 4) == 1
    assert solved(tasks([0], [2], [8.0], cap=4), 4, reassign_cost=False) == 1


def test_task_infeasible_even_alone() -> None:
    r = workload_bound(tasks([0, 1], [5, 6], [12.0, 12.0 + 1e-6], cap=3), 8)
    assert r.completed_bound == 1 and r.status == "optimal"
    assert r.candidates.tolist() == [True, False]  # 3 nodes x 4 warm ticks = 12
    never = tasks([0], [50], [math.inf], cap=2)  # the loss never reaches the target
    assert solved(never, 4) == 0


def test_caps_are_respected() -> None:
    # 8 nodes, but a cap of 2: two warm ticks give 4, not more.
    assert solved(tasks([0], [3], [4.0], cap=2), 8) == 1
    assert solved(tasks([0], [3], [4.5], cap=2), 8) == 0
    # Four capped tasks share 8 nodes exactly.
    assert solved(tasks([0] * 5, [3] * 5, [4.0] * 5, cap=2), 8) == 4


def test_concave_speed_up() -> None:
    # sqrt speed-up, 4 nodes, 2 warm ticks: 2 + 2 nodes give 2 * 2 * sqrt(2) = 5.66 in
    # all; two tasks of 2.9 each need 5.8.  With linear speed-up they fit.
    wl = tasks([0, 0], [3, 3], [2.9, 2.9], cap=4, alpha=0.5)
    assert solved(wl, 4) == 1
    assert solved(tasks([0, 0], [3, 3], [2.9, 2.9], cap=4, alpha=1.0), 4) == 2
    assert solved(tasks([0, 0], [3, 3], [2.8, 2.8], cap=4, alpha=0.5), 4) == 2
    # Alone, all 4 nodes: 2 * 4**0.5 = 4, and no fractional share beats that.
    assert solved(tasks([0], [3], [4.0], cap=4, alpha=0.5), 4) == 1
    assert solved(tasks([0], [3], [4.01], cap=4, alpha=0.5), 4) == 0


def test_work_counts_only_up_to_the_deadline() -> None:
    # Window [2, 5): ticks 2 (cold), 3 and 4; the tick that ends after the deadline is out.
    assert solved(tasks([2], [5], [2.0], cap=1), 1) == 1
    assert solved(tasks([2], [5], [2.0 + 1e-6], cap=1), 1) == 0
    # A task already at its target still needs one tick of progress to report it.
    assert solved(tasks([0], [1], [0.0], cap=1), 1) == 0
    assert solved(tasks([0], [2], [0.0], cap=1), 1) == 1


def test_integral_nodes_price_time_sharing() -> None:
    # One node, two tasks of 1.5: half a node each all along fits; whole nodes must switch,
    # and every switch costs a cold tick.
    wl = tasks([0, 0], [4, 4], [1.5, 1.5], cap=1)
    assert solved(wl, 1) == 2
    assert solved(wl, 1, integral_nodes=True) == 1


def brute_force(wl: Workload, num_nodes: int) -> tuple[int, list[np.ndarray]]:
    """Most completions over every schedule of whole nodes, and one schedule (node counts
    per tick) reaching it, with the simulator's rules written out independently."""
    n, horizon = len(wl), int(wl.deadline.max())

    @functools.cache
    def best(t: int, work: tuple, prev: tuple, done: frozenset) -> tuple[int, tuple]:
        if t == horizon:
            return 0, ()
        live = [k for k in range(n) if k not in done and wl.arrival[k] <= t < wl.deadline[k]]
        options = itertools.product(*(range(int(wl.cap[k]) + 1) for k in live))
        top = (-1, ())
        for choice in options:
            if sum(choice) > num_nodes:
                continue
            x = [0] * n
            for k, c in zip(live, choice):
                x[k] = c
            new_work, new_done = list(work), set(done)
            for k in live:
                warm = min(x[k], prev[k])  # nodes that stay; the others warm up
                if warm:
                    new_work[k] += wl.rate[k] * warm ** wl.alpha[k]
                    if new_work[k] >= wl.work_true[k] and t + 1 <= wl.deadline[k]:
                        new_done.add(k)
            later, plan = best(t + 1, tuple(new_work), tuple(x), frozenset(new_done))
            got = len(new_done) - len(done) + later
            if got > top[0]:
                top = (got, (tuple(x), *plan))
        return top

    value, plan = best(0, (0.0,) * n, (0,) * n, frozenset())
    return value, [np.array(x) for x in plan]


def replay(wl: Workload, num_nodes: int, plan: list[np.ndarray]) -> int:
    """Completions when the simulator runs ``plan`` on traces that reach each target at
    exactly the task's work."""
    n = len(wl)
    traces = TraceSet(
        ids=np.array([f"t{k}" for k in range(n)]),
        families=np.full(n, "tabular"),
        sources=np.full(n, "hand"),
        splits=np.full(n, "train"),
        offsets=np.arange(0, 2 * n + 1, 2),
        steps=np.ravel([[0.0, w] for w in wl.work_true]),
        loss=np.tile([1.0, 0.1], n),
        smooth=np.tile([1.0, 0.1], n),
    )
    wl = dataclasses.replace(wl, trace=np.arange(n), target=np.full(n, 0.5))
    sim = ClusterSim(ClusterConfig(num_nodes=num_nodes), traces)
    sim.reset(np.random.default_rng(0), workload=wl)
    for counts in plan:
        if sim.done:
            break
        counts = np.where(sim.status == ACTIVE, counts, 0)
        sim.tick(place(sim, counts))
    while not sim.done:
        sim.tick(np.full(num_nodes, -1))
    return sim.metrics()["completed"]


def test_whole_node_bound_is_the_clairvoyant_optimum() -> None:
    rng = np.random.default_rng(0)
    contended = shared = 0
    for _ in range(12):
        n = 4
        arrival = np.sort(rng.integers(0, 3, n))
        wl = tasks(
            arrival,
            arrival + rng.integers(2, 6, n),
            np.round(rng.uniform(1.0, 4.0, n), 2),
            cap=rng.integers(1, 3, n),
            alpha=rng.choice([0.6, 1.0], n),
        )
        optimum, plan = brute_force(wl, 2)
        assert replay(wl, 2, plan) == optimum  # the brute force follows the simulator
        assert solved(wl, 2, integral_nodes=True) == optimum
        relaxed = solved(wl, 2)
        assert relaxed >= optimum
        contended += optimum < workload_bound(wl, 2).candidates.sum()
        shared += relaxed > optimum
    assert contended >= 3 and shared >= 1  # the draws do test sharing the two nodes


@pytest.fixture(scope="module")
def traces():
    return _cached_traces(SMALL["traces"], SMALL["split"], None)


def real_config(load: float) -> ClusterConfig:
    return ClusterConfig(
        num_nodes=8, horizon=40, load=load, traces=SMALL["traces"], split=SMALL["split"]
    )


# the schedulers checked against the bound: the rules, the planners on exact work, and on
# predictions
BOUNDED = ("edf", "uniform", "oracle", "least_slack", "lara", "hedge:predictor=exact", "hedge")


@pytest.mark.parametrize("load", [1.0, 2.0])
def test_no_scheduler_beats_the_bound(traces, load: float) -> None:
    config = real_config(load)
    for seed in (3, 4):
        b = episode_bound(config, traces, seed, cache_dir="")
        assert b.status == "optimal"
        for name in BOUNDED:
            m = run_episode(make_scheduler(name), config, traces, seed)
            assert m["tasks"] == b.tasks
            assert m["completed"] <= b.completed_bound, (name, seed)


def test_time_limit_returns_a_proven_bound(traces) -> None:
    config = ClusterConfig(load=2.0, horizon=60, traces=SMALL["traces"], split=SMALL["split"])
    seed = 5
    done = max(
        run_episode(ALL_SCHEDULERS[name](), config, traces, seed)["completed"]
        for name in ("edf", "uniform", "oracle")
    )
    # No time even for the LP: the tasks that could finish alone still bound the rest.
    r = episode_bound(config, traces, seed, time_limit=1e-4, cache_dir="")
    assert r.status == "limit" and r.gap > 0
    assert r.completed_bound == r.candidates.sum() >= done
    # Whole nodes: HiGHS cannot branch to the end in a second; its proven bound stands.
    r = episode_bound(config, traces, seed, time_limit=1.0, integral_nodes=True, cache_dir="")
    assert r.status == "limit" and r.best_found < r.completed_bound
    assert done <= r.completed_bound <= r.candidates.sum()
    assert r.completed_bound == int(r.completed_bound)


def test_row_matches_the_simulator_metrics(traces) -> None:
    config = real_config(2.0)
    row = run_bound_episode(config, traces, 7, cache_dir="")
    sim = run_episode(ALL_SCHEDULERS["edf"](), config, traces, 7)
    assert set(sim) <= set(row)
    b = episode_bound(config, traces, 7, cache_dir="")
    assert row["completion_rate"] == b.completion_rate == b.completed_bound / sim["tasks"]
    assert row["completed"] == b.completed_bound
    for name in METRICS:
        if name not in ("tasks", "completed"):
            assert math.isnan(row[name]), name
    fams = [k[len("tasks_") :] for k in sim if k.startswith("tasks_")]
    assert fams and all(row[f"tasks_{f}"] == sim[f"tasks_{f}"] for f in fams)
    assert sum(row[f"completed_{f}"] for f in fams) == b.best_found


def test_workload_is_the_one_schedulers_see(traces) -> None:
    config = real_config(1.0)
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(11))
    wl = episode_workload(config, traces, 11)
    assert np.array_equal(wl.work_true, sim.workload.work_true)
    assert np.array_equal(wl.deadline, sim.workload.deadline)


def test_results_are_cached_per_programme(traces, tmp_path, monkeypatch) -> None:
    config = real_config(1.0)
    first = episode_bound(config, traces, 2, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1

    def unsolvable(*args, **kw):
        raise AssertionError("solved again")

    monkeypatch.setattr(bound, "workload_bound", unsolvable)
    again = episode_bound(config, traces, 2, cache_dir=tmp_path)
    assert again.completed_bound == first.completed_bound
    assert np.array_equal(again.completes, first.completes)
    monkeypatch.setenv("MARA_BOUND_CACHE", str(tmp_path))
    assert (
        run_bound_episode(config, traces, 2, node_limit=None)["completed"] == first.completed_bound
    )
    with pytest.raises(AssertionError, match="solved again"):
        episode_bound(config.replace(num_nodes=9), traces, 2, cache_dir=tmp_path)


@pytest.mark.parametrize("entry", ["", "[1, 2]", "null", '{"status": "optimal"}', "{trunc"])
def test_a_cache_entry_that_is_not_one_is_solved_again(traces, tmp_path, entry) -> None:
    config = real_config(1.0)
    first = episode_bound(config, traces, 2, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("*.json")
    cached.write_text(entry)
    again = episode_bound(config, traces, 2, cache_dir=tmp_path)
    assert again.completed_bound == first.completed_bound
    assert json.loads(cached.read_text())["status"] == "optimal"
    assert [p.name for p in tmp_path.iterdir()] == [cached.name]  # no temporary left
