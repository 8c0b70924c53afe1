"""FIFO with backfill, Tiresias and ElasticFlow: each rule's decisions on hand-built
situations, their parameters, and whole episodes on the fast path and through the env."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from mara_agents.baselines import ALL_SCHEDULERS, elasticflow, tiresias
from mara_agents.baselines.elasticflow import ElasticFlow, fill_plan, finish_time
from mara_agents.baselines.fifo import FIFO, requested_nodes
from mara_agents.baselines.tiresias import Tiresias, parse_thresholds
from mara_agents.evaluation.registry import SpecError, make_scheduler
from mara_agents.evaluation.runner import run_spec
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.engine import _cached_traces
from mara_env.schedulers import Scheduler, place, run_episode
from mara_env.traces import TraceSet, validate_traces
from mara_env.workload import Workload
from tests.conftest import run_script

NAMES = ("fifo", "tiresias", "elasticflow")


def hyperbola() -> TraceSet:
    """One trace whose loss is 100 / work: a task with target 100 / W completes exactly
    when its work reaches W."""
    steps = np.arange(1, 5001, dtype=np.float64)
    frame = pd.DataFrame(
        {"trace_id": "h", "family": "f", "source": "s", "step": steps, "loss": 100 / steps}
    )
    return TraceSet.from_frame(validate_traces(frame.assign(split="train")))


def hand_built(tasks: list[dict], num_nodes: int) -> ClusterSim:
    """A simulator at tick 0 on ``tasks`` (in arrival order; each with ``deadline`` and
    ``work``, optionally ``arrival``, ``cap``, ``rate``, ``alpha``; by default one unit of
    work per node-tick)."""
    optional = {"arrival": 0, "cap": 1, "rate": 1.0, "alpha": 1.0}
    col = {k: np.array([{**optional, **t}[k] for t in tasks]) for k in (*optional, "deadline")}
    work = np.array([t["work"] for t in tasks], np.float64)
    wl = Workload(
        arrival=col["arrival"].astype(np.int64),
        deadline=col["deadline"].astype(np.int64),
        target=100 / work,
        trace=np.zeros(len(tasks), np.int64),
        cap=col["cap"].astype(np.int64),
        alpha=col["alpha"].astype(np.float64),
        rate=col["rate"].astype(np.float64),
        size=work,
        work_sampled=work,
        work_true=work,
    )
    sim = ClusterSim(ClusterConfig(num_nodes=num_nodes), hyperbola())
    sim.reset(np.random.default_rng(0), workload=wl)
    return sim


def start(scheduler: Scheduler, sim: ClusterSim) -> Scheduler:
    scheduler.reset(sim, np.random.default_rng(0))
    return scheduler


def run_ticks(scheduler: Scheduler, sim: ClusterSim, ticks: int) -> None:
    for _ in range(ticks):
        sim.tick(scheduler.assign(sim))


@pytest.fixture
def episode_setup(small_config):
    cfg = ClusterConfig.from_dict({**small_config, "num_nodes": 8, "horizon": 40, "load": 2.0})
    return cfg, _cached_traces(cfg.traces, cfg.split, cfg.families)


# ---- FIFO -------------------------------------------------------------------------------
def test_fifo_request_is_the_reference_allocation() -> None:
    sim = hand_built([{"cap": c, "deadline": 9, "work": 5.0} for c in (1, 2, 4, 8)], 16)
    assert requested_nodes(sim, sim.active()).tolist() == [1, 2, 4, 4]  # ref_nodes = 4
    small = hand_built([{"cap": 8, "deadline": 9, "work": 5.0}], num_nodes=3)
    assert requested_nodes(small, small.active()).tolist() == [3]  # never more than exist


@pytest.mark.parametrize("backfill", ["easy", "any", "none"])
def test_fifo_gives_exactly_the_request_and_never_preempts(backfill, episode_setup) -> None:
    cfg, traces = episode_setup
    for seed in range(3):
        sim = ClusterSim(cfg, traces)
        sim.reset(np.random.default_rng(seed))
        fifo = start(FIFO(backfill=backfill), sim)
        held = np.zeros(len(sim.status), np.int64)
        while not sim.done:
            counts = fifo.allocate(sim)
            act = sim.active()
            request = requested_nodes(sim, act)
            assert set(np.flatnonzero(counts)) <= set(act.tolist())
            assert ((counts[act] == 0) | (counts[act] == request)).all()  # gang, never more
            kept = act[held[act] > 0]
            assert (counts[kept] == held[kept]).all()  # a started task keeps its nodes
            held = counts.copy()
            sim.tick(place(sim, counts))
        started = np.flatnonzero(sim.node_ticks_used > 0)
        # each started task's nodes joined it once and nothing ever moved them
        assert sim.stats.reassignments == int(requested_nodes(sim, started).sum())


def backfill_situation() -> ClusterSim:
    """Six nodes.  A and B (2 nodes each; A's deadline 10, B's 50) run from tick 0; at tick
    1 the head H asks for 4 of the 2 idle nodes, then C (2 nodes, deadline 30) and D (2
    nodes, deadline 8) queue behind it.  H's reservation: tick 10 (A's deadline), with
    no node to spare."""
    long = 1000.0
    return hand_built(
        [
            {"arrival": 0, "deadline": 10, "cap": 2, "work": long},  # A
            {"arrival": 0, "deadline": 50, "cap": 2, "work": long},  # B
            {"arrival": 1, "deadline": 60, "cap": 4, "work": long},  # H
            {"arrival": 1, "deadline": 30, "cap": 2, "work": long},  # C
            {"arrival": 1, "deadline": 8, "cap": 2, "work": long},  # D
        ],
        num_nodes=6,
    )


@pytest.mark.parametrize(
    "backfill, expected",
    [
        # EASY: C would still hold H's nodes at tick 10; D is gone by then
        ("easy", [2, 2, 0, 0, 2]),
        ("any", [2, 2, 0, 2, 0]),  # the first that fits, whatever it does to H
        ("none", [2, 2, 0, 0, 0]),  # nothing passes the head
    ],
)
def test_fifo_backfills_only_as_documented(backfill, expected) -> None:
    sim = backfill_situation()
    fifo = start(FIFO(backfill=backfill), sim)
    run_ticks(fifo, sim, 1)
    assert fifo.allocate(sim).tolist() == expected


def test_fifo_head_starts_once_its_nodes_free_and_backfilled_tasks_stay() -> None:
    sim = backfill_situation()
    fifo = start(FIFO(backfill="easy"), sim)
    run_ticks(fifo, sim, 10)  # A expires at tick 10
    assert sim.t == 10 and sim.status[0] == 3
    assert fifo.allocate(sim).tolist() == [0, 2, 4, 0, 0]  # D expired at 8; H got A's nodes


def test_fifo_backfill_not_past_a_head_that_fits_later_without_spare() -> None:
    # Head needs 4 with 2 idle; A frees 2 at tick 10 and B 2 at tick 50: the shadow tick
    # is 10 with nothing to spare, so a 1-node task with a late deadline may not start.
    sim = hand_built(
        [
            {"arrival": 0, "deadline": 10, "cap": 2, "work": 1e3},
            {"arrival": 0, "deadline": 50, "cap": 2, "work": 1e3},
            {"arrival": 1, "deadline": 60, "cap": 4, "work": 1e3},
            {"arrival": 1, "deadline": 40, "cap": 1, "work": 1e3},
        ],
        num_nodes=6,
    )
    fifo = start(FIFO(backfill="easy"), sim)
    run_ticks(fifo, sim, 1)
    assert fifo.allocate(sim).tolist() == [2, 2, 0, 0]
    assert start(FIFO(backfill="any"), sim).allocate(sim).tolist() == [2, 2, 0, 1]


def test_fifo_bad_backfill_is_one_error_naming_it() -> None:
    with pytest.raises(SpecError, match="fifo: backfill='later'; expected one of easy, any, none"):
        make_scheduler("fifo:backfill=later")


# ---- Tiresias ---------------------------------------------------------------------------
def test_tiresias_thresholds_parse_from_a_spec() -> None:
    assert make_scheduler("tiresias:thresholds=8-32").thresholds == (8.0, 32.0)
    assert make_scheduler("tiresias:thresholds=16").thresholds == (16.0,)
    assert parse_thresholds(2.5) == (2.5,)
    for bad in ("32-8", "8-8", "0", "-8", "eight", "8,32", "inf"):
        with pytest.raises(ValueError, match=f"tiresias: thresholds={bad!r}; expected"):
            Tiresias(thresholds=bad)
    with pytest.raises(ValueError, match="tiresias: starve=1.5; expected a whole number"):
        Tiresias(starve=1.5)
    with pytest.raises(SpecError, match="starve='?1.5'?; expected"):
        make_scheduler("tiresias:starve=1.5")


def test_tiresias_demotes_past_the_threshold_then_a_fresh_job_preempts() -> None:
    # A (4 nodes) from tick 0, B (4 nodes) from tick 1; one queue boundary at 8 node-ticks.
    sim = hand_built(
        [
            {"arrival": 0, "deadline": 90, "cap": 4, "work": 1e3},
            {"arrival": 1, "deadline": 90, "cap": 4, "work": 1e3},
        ],
        num_nodes=4,
    )
    tiresias = start(Tiresias(thresholds="8"), sim)
    assert tiresias.allocate(sim).tolist() == [4, 0]
    run_ticks(tiresias, sim, 1)
    # A has 4 node-ticks (< 8): same queue as B, first come first served; no preemption
    assert tiresias.queues(sim, sim.active()).tolist() == [0, 0]
    assert tiresias.allocate(sim).tolist() == [4, 0]
    run_ticks(tiresias, sim, 1)
    # A reached 8 node-ticks: demoted; B, fresh in the first queue, takes its nodes
    assert tiresias.queues(sim, sim.active()).tolist() == [1, 0]
    assert tiresias.allocate(sim).tolist() == [0, 4]


def test_tiresias_skips_a_request_that_does_not_fit_for_one_that_does() -> None:
    sim = hand_built(
        [
            {"arrival": 0, "deadline": 90, "cap": 4, "work": 1e3},
            {"arrival": 0, "deadline": 90, "cap": 4, "work": 1e3},
            {"arrival": 0, "deadline": 90, "cap": 1, "work": 1e3},
        ],
        num_nodes=5,
    )
    assert start(Tiresias(), sim).allocate(sim).tolist() == [4, 0, 1]


@pytest.mark.parametrize("starve, expected", [(0, [0, 2]), (1, [4, 0])])
def test_tiresias_promotes_a_starved_job(starve, expected) -> None:
    # A (4 nodes) is demoted after tick 0; B (2 nodes, fresh) then holds 2 nodes, so A's
    # gang of 4 does not fit and it waits.  With starve=1 one tick of waiting brings A back
    # to the first queue, where it came first.
    sim = hand_built(
        [
            {"arrival": 0, "deadline": 90, "cap": 4, "work": 1e3},
            {"arrival": 1, "deadline": 90, "cap": 2, "work": 1e3},
        ],
        num_nodes=4,
    )
    tiresias = start(Tiresias(thresholds="4", starve=starve), sim)
    run_ticks(tiresias, sim, 1)
    assert tiresias.allocate(sim).tolist() == [0, 2]  # tick 1: A demoted, B runs
    run_ticks(tiresias, sim, 1)
    assert tiresias.allocate(sim).tolist() == expected
    assert tiresias.allocate(sim).tolist() == expected  # planning a tick twice changes nothing


# ---- ElasticFlow ------------------------------------------------------------------------
def test_minimum_satisfactory_share_counts_warm_up_and_the_nodes_left() -> None:
    free = np.full(4, 4)
    # 9 work in 4 ticks from cold: the first tick gives nothing, so 3 nodes for 3 ticks
    n, use = fill_plan(9.0, 4, 4, 0, 1.0, 1.0, free)
    assert n == 3 and use.tolist() == [3, 3, 3, 3]
    n, use = fill_plan(9.0, 4, 4, 3, 1.0, 1.0, free)  # 3 warm nodes: done in 3 ticks
    assert n == 3 and use.tolist() == [3, 3, 3, 0]
    assert fill_plan(13.0, 4, 4, 0, 1.0, 1.0, free)[0] == 0  # not even the cap does
    # one node left in the first ticks, all four later: one node suffices by tick 6
    n, use = fill_plan(4.0, 6, 2, 0, 1.0, 1.0, np.array([1, 1, 1, 4, 4, 4]))
    assert n == 1 and use.tolist() == [1, 1, 1, 1, 1, 0]


def test_elasticflow_rejects_a_job_whose_minimum_share_does_not_fit() -> None:
    # Four nodes.  A's minimum share is 3 nodes until tick 4; B's is 2 over the same ticks,
    # which does not fit beside A: rejected.  C (1 node, deadline 10) fits on the node A
    # leaves and then on A's nodes once it is done: admitted.
    sim = hand_built(
        [
            {"deadline": 4, "cap": 4, "work": 9.0},  # A
            {"deadline": 4, "cap": 4, "work": 6.0},  # B
            {"deadline": 10, "cap": 2, "work": 4.0},  # C
        ],
        num_nodes=4,
    )
    ef = start(ElasticFlow(predictor="exact"), sim)
    counts = ef.allocate(sim)
    assert ef.admitted.tolist() == [True, False, True]
    assert ef.rejected.tolist() == [False, True, False]
    assert counts.tolist() == [3, 0, 1]  # nothing left over for the rejected task
    run_ticks(ef, sim, 1)
    ef.allocate(sim)
    assert ef.rejected[1]  # rejection is final


def test_elasticflow_gives_leftovers_by_marginal_return() -> None:
    # Both need one node by their far deadlines; of the 3 leftover nodes the long task A
    # gains most (its remaining time falls 10, 3.3, 1.7 ticks per node), short B 1 tick.
    sim = hand_built(
        [{"deadline": 100, "cap": 4, "work": 20.0}, {"deadline": 100, "cap": 4, "work": 2.0}],
        num_nodes=5,
    )
    assert start(ElasticFlow(predictor="exact"), sim).allocate(sim).tolist() == [4, 1]
    gains = -np.diff(finish_time(np.full(4, 20.0), np.arange(1, 5), np.zeros(4), 1.0, 1.0))
    assert gains == pytest.approx([10, 10 / 3, 5 / 3])


def test_elasticflow_serves_rejected_tasks_only_with_unwanted_nodes() -> None:
    # B cannot meet its deadline even on its cap: rejected, but gets what A cannot use.
    sim = hand_built(
        [{"deadline": 50, "cap": 2, "work": 10.0}, {"deadline": 3, "cap": 4, "work": 100.0}],
        num_nodes=8,
    )
    ef = start(ElasticFlow(predictor="exact"), sim)
    assert ef.allocate(sim).tolist() == [2, 4]
    assert ef.rejected.tolist() == [False, True]


def test_elasticflow_explores_until_it_can_predict() -> None:
    sim = hand_built([{"deadline": 60, "cap": 4, "work": 400.0}] * 2, num_nodes=8)
    ef = start(ElasticFlow(predictor="wls", explore_reports=3), sim)
    for _ in range(4):  # cold first tick, then three reports
        assert not (ef.admitted | ef.rejected).any()
        assert ef.allocate(sim).tolist() == [4, 4]  # LARA's uniform share of 8 nodes
        run_ticks(ef, sim, 1)
    ef.allocate(sim)
    assert (ef.admitted | ef.rejected).all()  # now each has been decided


@pytest.mark.parametrize("predictor", ["wls", "flow", "exact"])
def test_elasticflow_predictors_are_built_from_a_spec(predictor) -> None:
    ef = make_scheduler(f"elasticflow:predictor={predictor}:margin=0.2")
    assert isinstance(ef, ElasticFlow) and ef.predictor == predictor and ef.margin == 0.2
    assert (
        make_scheduler(f"elasticflow:predictor={predictor}").explore_reports
        == {
            "wls": 6,
            "flow": 3,
            "exact": 0,
        }[predictor]
    )


@pytest.mark.parametrize(
    "spec, culprit",
    [
        ("elasticflow:predictor=optimus", "predictor='optimus'; expected one of wls, flow"),
        ("elasticflow:margin=-1", "margin=-1; expected a number > -1"),
        ("elasticflow:predictor=flow:explore_reports=2", "explore_reports=2; expected a whole"),
        ("elasticflow:predictor=wls:explore_reports=1", "explore_reports=1; expected a whole"),
    ],
)
def test_elasticflow_bad_spec_is_one_error_naming_it(spec, culprit) -> None:
    with pytest.raises(SpecError, match=f"elasticflow: {culprit}"):
        make_scheduler(spec)


def test_elasticflow_margin_must_be_a_number() -> None:
    with pytest.raises(SpecError, match="margin='big'; expected"):
        make_scheduler("elasticflow:margin=big")
    with pytest.raises(ValueError, match="elasticflow: margin='big'; expected a number > -1"):
        ElasticFlow(margin="big")


def test_elasticflow_predicted_work_takes_the_margin_on_total_work() -> None:
    sim = hand_built([{"deadline": 60, "cap": 4, "work": 40.0}], num_nodes=4)
    ef = start(ElasticFlow(predictor="exact", margin=0.5), sim)
    run_ticks(ef, sim, 3)  # 8 work done (a cold tick, then 4 a tick)
    assert sim.work[0] == 8.0
    assert ef.remaining(sim, np.array([0]))[0] == pytest.approx(40 * 1.5 - 8)


# ---- all three --------------------------------------------------------------------------
def test_registered_and_torch_free_at_import() -> None:
    assert {n: ALL_SCHEDULERS[n] for n in NAMES} == {
        "fifo": FIFO,
        "tiresias": Tiresias,
        "elasticflow": ElasticFlow,
    }
    code = (
        "import sys, mara_agents.baselines.fifo, mara_agents.baselines.tiresias, "
        "mara_agents.baselines.elasticflow; "
        "bad = [m for m in ('torch', 'ray') if m in sys.modules]; assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


SPECS = (*NAMES, "fifo:backfill=any", "tiresias:thresholds=8-32:starve=10")
SPECS += ("elasticflow:predictor=exact", "elasticflow:predictor=flow")


@pytest.mark.parametrize("spec", SPECS)
def test_whole_episodes_are_valid_and_deterministic(spec, episode_setup) -> None:
    cfg, traces = episode_setup
    m = run_episode(make_scheduler(spec), cfg, traces, seed=3)
    assert 0 < m["completion_rate"] <= 1 and m["tasks"] > 0
    assert m == run_episode(make_scheduler(spec), cfg, traces, seed=3)


@pytest.mark.parametrize("name", NAMES)
def test_driven_through_the_env_as_on_the_fast_path(name, episode_setup) -> None:
    cfg, traces = episode_setup
    cfg = cfg.replace(num_slots=32)  # every active task visible: the env path is exact
    fast = run_spec(name, cfg, traces, seed=5)
    assert run_spec(f"env={name}", cfg, traces, seed=5) == fast


@pytest.mark.parametrize("name", ["fifo", "tiresias", "elasticflow"])
def test_tuning_grids_build_and_hold_the_defaults(tmp_path, name) -> None:
    """benchmarks/tune_baselines.py on one episode: every point of the grid builds and
    runs, the scheduler's defaults are a point of it, and the table ranks by the paired
    difference from the best."""
    out = tmp_path / f"{name}.csv"
    argv = ["--scheduler", name, "--episodes", "1", "--loads", "1.0", "--no-progress"]
    proc = run_script("benchmarks/tune_baselines.py", *argv, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on split 'val'" in proc.stdout and f"chosen: {name}:" in proc.stdout
    table = pd.read_csv(out)
    for spec in table["spec"]:
        assert isinstance(make_scheduler(spec), ALL_SCHEDULERS[name])
    defaults = {
        "fifo": [f"fifo:backfill={FIFO().backfill}"],
        "tiresias": [
            f"tiresias:thresholds={tiresias.DEFAULT_THRESHOLDS}:starve={tiresias.DEFAULT_STARVE}"
        ],
        "elasticflow": [  # the grid's predictors, each at its default margin
            f"elasticflow:predictor={p}:margin={elasticflow.DEFAULT_MARGINS[p]}"
            for p in ("wls", "flow")
        ],
    }[name]
    assert set(defaults) <= set(table["spec"]), sorted(table["spec"])
    assert table["vs_best"].iloc[0] == 0 and (table["vs_best"] <= 0).all()
