"""The hedge planner: its chances and admission on hand-built tasks, its exact-work twin
against single-task plans, whole episodes (valid, deterministic) and its spec options."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flow_predictor.deadline_prior import HISTORY_PRIORS, SHIPPED_PRIOR, DeadlinePrior
from mara_agents.baselines import ALL_SCHEDULERS
from mara_agents.baselines.hedge import Hedge
from mara_agents.evaluation.registry import SpecError, make_scheduler
from mara_agents.planning.hedge_rule import (
    MAX_QUANTILES,
    HedgeParams,
    finish_chances,
    hedge_plan,
    plan_counts,
)
from mara_agents.planning.share_rule import FlowShareParams
from mara_agents.policy.features import TeacherPlan
from mara_env.cluster import DONE, ClusterSim
from mara_env.schedulers import run_episode, ticks_needed
from tests.agents.baselines.test_rival_baselines import episode_setup, hand_built  # noqa: F401 (fixture)


def test_registered() -> None:
    assert ALL_SCHEDULERS["hedge"] is Hedge
    assert make_scheduler("hedge:predictor=exact").predictor == "exact"
    assert make_scheduler("hedge").predictor == "cluster"
    assert make_scheduler("hedge:predictor=flow").prior is None
    assert make_scheduler("hedge:predictor=exact:confidence=0.3").params.confidence == 0.3
    assert make_scheduler("hedge:predictor=exact:urgency=1").params.urgency == 1.0


def test_chances_count_the_samples_that_finish() -> None:
    # 4 samples of work 2, 4, 6, inf; 3 ticks left on 1 unit per node-tick, nothing warm:
    # 1 node does 2 (a cold tick), 2 nodes 4, 3 nodes 6.
    samples = np.array([[2.0, 4.0, 6.0, np.inf]])
    one = np.ones(1)
    chance, cost = finish_chances(samples, 3 * one, np.array([4]), 0 * one, one, one, 1.0)
    assert chance[0].tolist() == [0.0, 0.25, 0.5, 0.75, 0.75]
    # 2 nodes: work 2 done in 2 ticks, the others held for all 3
    assert cost[0, 2] == pytest.approx(2 * (2 + 3 + 3 + 3) / 4)
    two, twice = np.ones(2), np.vstack([samples, samples])
    capped, _ = finish_chances(twice, 3 * two, np.array([4, 2]), 0 * two, two, two, 1.0)
    assert capped[1, 3:].tolist() == [0.0, 0.0]  # beyond the cap
    # miss_cost charges a sample that misses that share of the 3 ticks left: on 2 nodes
    # work 2 and 4 finish (2 and 3 ticks), 6 and inf miss (1.5 each); the chances stay
    cheap_chance, cheap = finish_chances(samples, 3 * one, np.array([4]), 0 * one, one, one, 0.5)
    assert cheap_chance.tolist() == chance.tolist()
    assert cheap[0, 2] == pytest.approx(2 * (2 + 3 + 1.5 + 1.5) / 4)


def test_admission_takes_the_most_chance_per_node_tick() -> None:
    # Two tasks due in 4 ticks on 2 nodes (cap 2), each needing both nodes: the first for
    # 3 ticks (work 4: 6 node-ticks), the second for all 4 (work 6: 8): the first is kept.
    one = np.ones(2)
    plan = hedge_plan(
        np.array([[4.0], [6.0]]), 4 * one, np.array([2, 2]), 0 * one, one, one, 2, 1.0
    )
    assert plan.kept.tolist() == [True, False]
    assert plan.counts.tolist() == [2, 0]
    # 4 nodes: both fit, each at its cheapest deadline-meeting count
    plan = hedge_plan(
        np.array([[4.0], [6.0]]), 4 * one, np.array([2, 2]), 0 * one, one, one, 4, 1.0
    )
    assert plan.counts.tolist() == [2, 2]


def test_steps_that_raise_a_chance_cheaply_come_first() -> None:
    # Two samples each; 3 ticks, 4 nodes.  A (cap 4): work 2 or 8, chance 0.5 on 1-3
    # nodes (3 node-ticks on 1), 1.0 on 4 (10 node-ticks).  B (cap 2): work 2 or 4, chance
    # 0.5 on 1 node (3 node-ticks), 1.0 on 2 (5).  Per node-tick: B to 2 (0.2), A to 1
    # (0.17); A's next gain needs 3 more nodes, 1 is left: it goes to A up to its cap.
    one = np.ones(2)
    samples = np.array([[2.0, 8.0], [2.0, 4.0]])
    plan = hedge_plan(samples, 3 * one, np.array([4, 2]), 0 * one, one, one, 4, 1.0)
    assert plan.kept.tolist() == [True, True]
    assert plan.counts.tolist() == [2, 2]
    assert plan.chance[1, 2] == 1.0
    # a task below the confidence is not pursued
    low = hedge_plan(
        samples[:1], 3 * one[:1], np.array([1]), 0 * one[:1], one[:1], one[:1], 4, 1.0, 0.6
    )
    assert low.counts.tolist() == [0]


def test_urgency_serves_the_task_that_cannot_wait() -> None:
    # 2 nodes, 1 unit of work per node-tick, a joining node loses its first tick; rows in
    # deadline order.  A: work 2, due in 2 ticks: only both nodes from now finish it (4
    # node-ticks).  B: work 1, due in 4: one node finishes it in 2 ticks (2 node-ticks),
    # now or a tick later.  Plain hedge takes the most chance per node-tick, B, and A can
    # no longer finish; with urgency B's chance is not lost by waiting, so A is served.
    one = np.ones(2)
    args = (
        np.array([[2.0], [1.0]]),
        np.array([2.0, 4.0]),
        np.array([2, 2]),
        0 * one,
        one,
        one,
        2,
        1.0,
    )
    plain, urgent = hedge_plan(*args), hedge_plan(*args, urgency=1.0)
    assert plain.counts.tolist() == [0, 2]  # B kept (and given the spare node), A starved
    assert urgent.counts.tolist() == [2, 0]  # A now; B waits a tick, still in time
    assert (plain.chance == urgent.chance).all()  # the plan reports chances, not values


def test_urgency_weighs_what_waiting_its_wait_would_lose() -> None:
    # 1 node, 1 unit of work per node-tick, a joining node loses its first tick.  A: work
    # 2, due in 6 ticks (3 ticks on the node: in time now, or a tick later, not 4 later).
    # B: work 1, due in 8 (2 ticks; in time 4 ticks later too).  Plain hedge takes the
    # most chance per node-tick, B.  Waiting one tick loses neither task anything, so with
    # urgency over one tick neither is kept; over 4 ticks A would miss, and A is served.
    one = np.ones(2)
    args = (
        np.array([[2.0], [1.0]]),
        np.array([6.0, 8.0]),
        np.array([1, 1]),
        0 * one,
        one,
        one,
        1,
        1.0,
    )
    assert hedge_plan(*args).counts.tolist() == [0, 1]
    assert hedge_plan(*args, urgency=1.0).counts.tolist() == [0, 0]
    assert hedge_plan(*args, urgency=1.0, wait=4).counts.tolist() == [1, 0]
    assert hedge_plan(*args, wait=4).counts.tolist() == [0, 1]  # no urgency: wait is inert


def test_wait_is_written_with_urgency_and_an_old_urgency_spec_waited_a_tick() -> None:
    from mara_agents.planning.hedge_rule import HedgeParams
    from mara_agents.planning.share_rule import FlowShareParams
    from mara_agents.policy.features import TeacherPlan
    from mara_agents.policy.policy_file import recorded_teacher

    on = TeacherPlan("hedge", FlowShareParams(), HedgeParams(urgency=1.0, wait=10))
    assert ":urgency=1.0:wait=10:" in on.spec
    assert TeacherPlan.from_spec(on.spec).hedge == on.hedge  # reads back
    off = TeacherPlan("hedge", FlowShareParams(), HedgeParams(urgency=0.0, wait=10))
    assert "wait" not in off.spec  # inert without urgency: not written
    old = "hedge:confidence=0.05:flow_spread=2.0:quantiles=256:urgency=1.0:miss_cost=cluster"
    assert TeacherPlan.from_spec(recorded_teacher(old)).hedge.wait == 1
    assert recorded_teacher(on.spec) == on.spec


def test_the_teacher_spec_writes_urgency_and_an_old_spec_reads_as_before() -> None:
    from mara_agents.planning.hedge_rule import HedgeParams
    from mara_agents.planning.share_rule import FlowShareParams
    from mara_agents.policy.features import HEDGE_TEACHER, TeacherPlan
    from mara_agents.policy.policy_file import recorded_teacher

    plain = "hedge:confidence=0.05:flow_spread=2.0:quantiles=256"
    assert HEDGE_TEACHER == f"{plain}:urgency=1.0:wait=15:miss_cost=cluster"  # hedge's own
    off = TeacherPlan("hedge", FlowShareParams(), HedgeParams(urgency=0.0))
    assert off.spec == f"{plain}:urgency=0.0:miss_cost=cluster"  # written: 0 is no default
    assert TeacherPlan.from_spec(off.spec).hedge.urgency == 0.0  # reads back
    # mara_v18's record, written while urgency was off by default, reads as it meant
    v18 = f"{plain}:miss_cost=cluster"
    assert TeacherPlan.from_spec(recorded_teacher(v18)).hedge == HedgeParams(urgency=0.0)
    cheap = TeacherPlan("hedge", FlowShareParams(), HedgeParams(miss_cost=0.1))
    assert cheap.spec == f"{plain}:urgency=1.0:wait=15:miss_cost=0.1"
    assert TeacherPlan.from_spec(cheap.spec).hedge.miss_cost == 0.1


def single_task_cases(n: int):
    rng = np.random.default_rng(7)
    for _ in range(n):
        yield {
            "work": float(rng.integers(1, 60)),
            "deadline": int(rng.integers(1, 25)),
            "cap": int(rng.choice([1, 2, 4, 8])),
            "alpha": float(rng.choice([0.6, 0.8, 1.0])),
            "rate": float(rng.choice([0.5, 1.0, 2.0])),
        }


def test_exact_twin_meets_every_task_a_single_task_plan_meets() -> None:
    met = 0
    for task in single_task_cases(150):
        nodes = np.arange(1, min(task["cap"], 8) + 1)
        ticks = ticks_needed(task["work"], nodes, 0, task["rate"], task["alpha"])
        feasible = bool((ticks <= task["deadline"]).any())
        sim = hand_built([task], num_nodes=8)
        hedge = Hedge(predictor="exact")
        hedge.reset(sim, np.random.default_rng(0))
        while not sim.done:
            sim.tick(hedge.assign(sim))
        assert (sim.status[0] == DONE) == feasible, task
        met += feasible
    assert 20 < met < 150  # both kinds of case were drawn


@pytest.mark.parametrize(
    "spec",
    [
        "hedge:predictor=exact",
        "hedge",
        "hedge:predictor=deadline",
        "hedge:predictor=flow",
        "hedge:predictor=deadline:urgency=1",
        "hedge:predictor=deadline:prior=workload:urgency=1",
        "hedge:miss_cost=0.1",
        "hedge:predictor=task",
        "hedge:predictor=task-no-flow:urgency=1",
    ],
)
def test_whole_episodes_are_valid_and_deterministic(spec, episode_setup) -> None:  # noqa: F811
    cfg, traces = episode_setup
    scheduler = make_scheduler(spec)
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(3))
    scheduler.reset(sim, np.random.default_rng([3, 1]))
    while not sim.done:
        counts = scheduler.allocate(sim)
        assert counts.sum() <= cfg.num_nodes
        assert (counts <= sim.workload.cap).all()
        assert (counts[sim.status != 1] == 0).all()  # only active tasks get nodes
        sim.tick(scheduler.assign(sim))
    m = run_episode(make_scheduler(spec), cfg, traces, seed=3)
    assert m == sim.metrics()
    assert 0 < m["completion_rate"] <= 1
    assert m == run_episode(make_scheduler(spec), cfg, traces, seed=3)


@pytest.mark.parametrize(
    "spec, words",
    [
        ("hedge:predictor=psychic", "predictor='psychic'"),
        ("hedge:confidence=1.5", "confidence=1.5"),
        ("hedge:predictor=oracle", "predictor='oracle' is written predictor='exact'"),
        ("hedge:tail=2", "unknown parameter 'tail'"),
        ("hedge:explore=1", "unknown parameter 'explore'"),
        ("hedge:confidence=0", "confidence=0; expected a probability in (0, 1]"),
        ("hedge:flow_spread=1e9", "flow_spread=1000000000.0; expected a factor in (0, 100]"),
        ("hedge:quantiles=1000000000000", f"expected a whole number in [1, {MAX_QUANTILES}]"),
        ("hedge:margin=0.1", "unknown parameter 'margin'"),
        ("hedge:flow_spread=0", "flow_spread=0"),
        ("hedge:quantiles=0", "quantiles=0"),
        ("hedge:urgency=2", "urgency=2; expected a weight in [0, 1]"),
        ("hedge:urgency=-0.5", "urgency=-0.5; expected a weight in [0, 1]"),
        ("hedge:urgency=1:wait=0", "wait=0; expected a whole number of ticks in [1, 1000]"),
        ("hedge:urgency=1:wait=2.5", "wait=2.5; expected a whole number of ticks"),
        ("hedge:miss_cost=1.5", "miss_cost=1.5; expected a share of the time left in [0, 1]"),
        ("hedge:miss_cost=histroy", "miss_cost='histroy'; expected a share of the time left"),
        ("hedge:quantiles=2.5", "quantiles=2.5; expected a whole number"),
        ("hedge:predictor=flow:prior=p.json", "predictor='flow' uses none"),
        ("hedge:prior=/no/such/prior.json", "/no/such/prior.json: no such file"),
        ("hedge:predictor=exact:prior=workload", "predictor='exact' uses none"),
        ("hedge:prior=history", "prior='history' is renamed: write 'cluster'"),
        ("hedge:miss_cost=history", "miss_cost='history' is renamed: write 'cluster'"),
    ],
)
def test_bad_options_are_one_line_errors(spec, words) -> None:
    with pytest.raises(SpecError) as err:
        make_scheduler(spec)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("quantiles", [8, 256])
def test_the_deadline_informed_distribution_is_read_as_evenly_spaced_quantiles(
    quantiles,
    episode_setup,  # noqa: F811
) -> None:
    cfg, traces = episode_setup
    scheduler = make_scheduler(f"hedge:predictor=deadline:quantiles={quantiles}")
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(3))
    scheduler.reset(sim, np.random.default_rng([3, 1]))
    while not (sim.status == 1).any():
        sim.tick(scheduler.assign(sim))
    samples = scheduler.predictions(sim, np.flatnonzero(sim.status == 1)).samples
    assert samples.shape[1] == quantiles
    assert (np.diff(samples, axis=1) >= 0).all()  # sorted: the quantiles, in order


def test_prior_workload_reads_each_workloads_own_history(episode_setup) -> None:  # noqa: F811
    # prior=workload: per episode the prior fitted on the train history of its workload
    # under the cluster's settings (the shipped per-workload fits under the defaults)
    cfg, traces = episode_setup
    scheduler = make_scheduler("hedge:predictor=deadline:prior=workload:urgency=1")
    for jobs in (None, "philly"):
        sim = ClusterSim(cfg, traces)
        sim.config = cfg.replace(jobs=jobs)  # only the settings are read
        scheduler.reset(sim, np.random.default_rng(0))
        shipped = DeadlinePrior.load(HISTORY_PRIORS[jobs])
        assert scheduler.prior.fitted_on == shipped.fitted_on
        assert scheduler.prior.fitted_on["jobs"] == ["none" if jobs is None else jobs]
    # on the synthetic workload it plans as the synthetic history's file does
    synthetic = f"hedge:predictor=deadline:prior={HISTORY_PRIORS[None]}:urgency=1"
    spec = "hedge:predictor=deadline:prior=workload:urgency=1"
    assert run_episode(make_scheduler(spec), cfg, traces, seed=3) == run_episode(
        make_scheduler(synthetic), cfg, traces, seed=3
    )


def test_default_prior_is_the_clusters_own_history(episode_setup) -> None:  # noqa: F811
    # under the default settings the shipped file; under other users' deadlines a prior
    # fitted on the train tasks drawn under them, never the padded users' file
    cfg, traces = episode_setup
    scheduler = make_scheduler("hedge:predictor=deadline")
    sim = ClusterSim(cfg, traces)
    scheduler.reset(sim, np.random.default_rng(0))
    assert scheduler.prior.fitted_on == DeadlinePrior.load(SHIPPED_PRIOR).fitted_on
    blind = cfg.replace(deadline_model="blind")
    scheduler.reset(ClusterSim(blind, traces), np.random.default_rng(0))
    assert scheduler.prior.fitted_on["cluster"] == {"deadline_model": "blind"}
    assert scheduler.prior.fitted_on["jobs"] == ["none", "philly"]
    first = run_episode(make_scheduler("hedge:predictor=deadline"), blind, traces, seed=2)
    assert first == run_episode(scheduler, blind, traces, seed=2)  # same seed, same episode


def test_by_default_a_miss_is_priced_by_the_clusters_history(episode_setup) -> None:  # noqa: F811
    from mara_agents.planning.history import ClusterHistory

    cfg, traces = episode_setup
    assert make_scheduler("hedge").params.miss_cost == "cluster"
    for config in (cfg, dataclasses.replace(cfg, deadline_model="unbiased")):
        price = ClusterHistory.of(config).price()
        for spec, planned in [
            ("hedge", price),
            ("hedge:predictor=deadline", price),
            ("hedge:miss_cost=0.5", 0.5),
            ("hedge:predictor=exact", price),  # chances of 0 or 1: the price never acts
        ]:
            hedge = make_scheduler(spec)
            sim = ClusterSim(config, traces)
            sim.reset(np.random.default_rng(3))
            hedge.reset(sim, np.random.default_rng([3, 1]))
            assert hedge.planned.miss_cost == planned, spec
    # the default users' history prices it low, the unbiased users' at today's rule
    assert ClusterHistory.of(cfg).price() == 0.1
    assert ClusterHistory.of(dataclasses.replace(cfg, deadline_model="unbiased")).price() == 1.0


def test_by_default_the_distribution_is_the_one_the_history_chose_for_the_workload(
    episode_setup,  # noqa: F811
    tmp_path,
) -> None:
    import json

    from flow_predictor.deadline_prior import DeadlineInformed
    from flow_predictor.task_work import TaskWork
    from mara_agents.planning.history import ClusterHistory, shipped_choices

    cfg, traces = episode_setup
    # a history that chose the fused distribution on Philly's days, the calibrated model
    # on synthetic tasks
    (record,) = [r for r in shipped_choices() if r["fitted_on"]["cluster"] == {}]
    mine = {**record, "distribution": {"none": "task", "philly": "flow+deadline"}}
    (tmp_path / "history.json").write_text(json.dumps([mine]))
    hedge = make_scheduler("hedge")
    for jobs, kind in ((None, TaskWork), ("philly", DeadlineInformed)):
        config = cfg.replace(jobs=jobs)
        history = ClusterHistory.of(config, [tmp_path / "history.json"])
        hedge.use_history(history)
        sim = ClusterSim(cfg, traces)
        sim.config = config  # only the settings are read
        hedge.reset(sim, np.random.default_rng(0))
        # the record read is mine (the shipped one chose the calibrated model on both)
        assert hedge.distribution == history.distribution() == mine["distribution"][jobs or "none"]
        assert isinstance(hedge._predictions, kind), jobs
    hedge.use_history(None)
    # on the synthetic workload it plays the episode the calibrated model does
    chosen = ClusterHistory.of(cfg).distribution()
    assert run_episode(make_scheduler("hedge"), cfg, traces, seed=3) == run_episode(
        make_scheduler(f"hedge:predictor={chosen}"), cfg, traces, seed=3
    )
    # a history without a choice is refused, naming the command that makes one
    untuned = dataclasses.replace(ClusterHistory.of(cfg), distributions=None)
    hedge.use_history(untuned)
    with pytest.raises(ValueError, match="choice of distribution.*mara history fit"):
        run_episode(hedge, cfg, traces, seed=3)


def test_a_handed_history_is_used_and_another_clusters_refused(episode_setup) -> None:  # noqa: F811
    from mara_agents.planning.history import ClusterHistory

    cfg, traces = episode_setup
    unbiased = dataclasses.replace(cfg, deadline_model="unbiased")
    hedge = make_scheduler("hedge:predictor=deadline")
    hedge.use_history(ClusterHistory.of(unbiased))
    assert run_episode(hedge, unbiased, traces, seed=2) == run_episode(
        make_scheduler("hedge:predictor=deadline"), unbiased, traces, seed=2
    )
    with pytest.raises(ValueError, match="handed the history of cluster"):
        run_episode(hedge, cfg, traces, seed=2)


def test_the_rule_plans_only_on_a_resolved_price() -> None:
    params = HedgeParams(miss_cost="cluster")
    assert params.on_cluster(0.1).miss_cost == 0.1
    assert HedgeParams(miss_cost=0.5).on_cluster(0.1).miss_cost == 0.5
    one = np.ones(1)
    with pytest.raises(ValueError, match="miss_cost='cluster' is a price per cluster"):
        plan_counts(np.ones((1, 4)), np.zeros(1, bool), one, one, one, one, one, 2, params)
    with_it = TeacherPlan("hedge", FlowShareParams(), params)
    assert with_it.spec.endswith(":miss_cost=cluster")
    assert TeacherPlan.from_spec(with_it.spec) == with_it


def test_observed_load_counts_the_arrived_tasks_by_what_their_deadlines_say() -> None:
    # a prior without windows: every task's work is exp(log ratio) times the work its
    # window would do at its reference allocation, here a median ratio of 1/2
    prior = DeadlinePrior(np.log([0.25, 0.5, 1.0]), {})
    tasks = [
        {"deadline": 10, "work": 1.0, "cap": 2},  # n_ref 2, window 10: 10 node-ticks
        {"arrival": 1, "deadline": 5, "work": 1.0, "cap": 8},  # n_ref 4, window 4: 8
        {"arrival": 3, "deadline": 9, "work": 1e6, "cap": 1},  # not arrived by tick 1
    ]
    sim = hand_built(tasks, num_nodes=4)
    assert prior.observed_load(sim) == pytest.approx(10 / (4 * 1))  # tick 0: task 0 only
    sim.tick(np.full(4, -1))
    assert prior.observed_load(sim) == pytest.approx((10 + 8) / (4 * 2))  # nor its work
    # with windows, the median of the history tasks nearest in window, as ratios_of reads
    shipped = DeadlinePrior.load(SHIPPED_PRIOR)
    window = np.array([10.0, 4.0])
    median = np.median(shipped.ratios_of(window), axis=1)
    expected = (np.array([2, 4]) * window * np.exp(median)).sum() / (4 * 2)
    assert shipped.observed_load(sim) == pytest.approx(expected)


def test_light_load_plans_earliest_deadline_first_at_caps() -> None:
    # 4 nodes, rows in deadline order; hedge keeps the cheap later task B and gives the
    # urgent, uncertain A less than its cap; below `light` the plan is EDF's: A its cap
    samples = np.array([[1.0, 6.0], [1.0, 1.0], [2.0, 2.0]])
    args = (
        samples,
        np.zeros(3, bool),
        np.array([3.0, 9.0, 9.0]),
        np.array([3, 2, 2]),
        np.zeros(3),
        np.ones(3),
        np.ones(3),
        4,
    )
    params = HedgeParams(miss_cost=1.0, light=0.8)
    plain, plan = plan_counts(*args, HedgeParams(miss_cost=1.0))
    assert plan_counts(*args, params, 0.9)[0].tolist() == plain.tolist()  # not light
    assert plan_counts(*args, params, None)[0].tolist() == plain.tolist()  # unknown
    light, light_plan = plan_counts(*args, params, 0.5)
    assert light.tolist() == [3, 1, 0] != plain.tolist()
    assert (light_plan.chance == plan.chance).all()  # the plan is still returned
    assert plan_counts(*args, HedgeParams(miss_cost=1.0, light=0.0), 0.0)[0].tolist() == (
        plain.tolist()
    )  # light=0: never


def test_hedge_turns_to_edf_only_while_its_cluster_is_light(episode_setup) -> None:  # noqa: F811
    from mara_env.schedulers import EDF

    cfg, traces = episode_setup
    light = make_scheduler("hedge:predictor=deadline:light=100")  # always light
    heavy = make_scheduler("hedge:predictor=deadline:light=0")
    edf = EDF()
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(3))
    for s in (light, heavy, edf):
        s.reset(sim, np.random.default_rng(0))
    differs = 0
    while not sim.done:
        counts = light.allocate(sim)
        assert counts.tolist() == edf.allocate(sim).tolist()
        differs += counts.tolist() != heavy.allocate(sim).tolist()
        sim.tick(light.assign(sim))
    assert differs > 0
    # a distribution without a deadline prior has no observed load: the knob is refused
    with pytest.raises(SpecError, match="light"):
        make_scheduler("hedge:predictor=exact:light=1")
