"""The lookahead teacher: its rollouts choose a drop that hand-built futures make clearly
better, with one candidate it is hedge, whole episodes repeat by seed and never read the
truth, and its spec options."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mara_agents.baselines import ALL_SCHEDULERS
from mara_agents.baselines.hedge import Hedge
from mara_agents.baselines.lookahead import Lookahead
from mara_agents.evaluation.registry import SpecError, make_scheduler
from mara_agents.planning.hedge_rule import HedgeParams, plan_counts
from mara_agents.planning.lookahead_rule import (
    Candidate,
    Futures,
    LookaheadParams,
    alternatives,
    candidate_counts,
    choose,
    rollout_values,
)
from mara_env.cluster import PENDING, ClusterSim
from mara_env.schedulers import place, run_episode
from tests.agents.baselines.test_rival_baselines import episode_setup  # noqa: F401 (fixture)

PRICED = HedgeParams(miss_cost=1.0)  # hedge's knobs with a price of a miss set

SPEC = "lookahead:predictor=deadline:candidates=3:futures=4:horizon=4"


def test_registered() -> None:
    assert ALL_SCHEDULERS["lookahead"] is Lookahead
    made = make_scheduler(SPEC)
    assert made.params == LookaheadParams(candidates=3, futures=4, horizon=4)
    assert made.hedge.predictor == "deadline"


def test_a_drop_the_futures_favour_is_chosen() -> None:
    # Two nodes, one unit of work per node-tick, 6 ticks left.  Hedge believes A (2 warm
    # nodes) needs 2 or 1000 and B (cold) 9.5 or 1000: A finishes in one tick half the time
    # (0.5 chance for 7 node-ticks) and B on both nodes half the time (0.5 for 12), so it
    # keeps A.  In every future A needs 1000 and B 9.5: kept, A wastes the nodes and B
    # misses; dropped, B finishes in the sixth tick.
    cap, warm = np.array([2, 2]), np.array([2, 0])
    one, left = np.ones(2), np.full(2, 6.0)
    samples = np.array([[2.0, 1000.0], [9.5, 1000.0]])
    unknown = np.zeros(2, bool)
    counts, plan = plan_counts(samples, unknown, left, cap, warm, one, one, 2, PRICED)
    assert counts.tolist() == [2, 0]
    others = alternatives(Candidate(), plan, cap, 2)
    assert others[0] == Candidate(drop=(0,))
    candidates = [Candidate(), *others]
    every = np.arange(2)
    first = np.array(
        [
            candidate_counts(c, every, samples, unknown, left, cap, warm, one, one, 2, PRICED)
            for c in candidates
        ]
    )
    assert first[0].tolist() == counts.tolist()  # the base is hedge's plan
    m = 4
    futures = Futures(
        samples=np.broadcast_to(samples, (m, 2, 2)).copy(),
        remaining=np.tile([1000.0, 9.5], (m, 1)),
        start=np.zeros((m, 2), np.int64),
        deadline=np.full((m, 2), 6),
        cap=np.tile(cap, (m, 1)),
        rate=np.ones((m, 2)),
        alpha=np.ones((m, 2)),
        warm=np.tile(warm, (m, 1)),
    )
    params = LookaheadParams(candidates=3, horizon=6, futures=m)
    values = rollout_values(candidates, first, futures, unknown, 2, 1.0, PRICED, params)
    assert values[0].tolist() == [0.0] * m
    assert values[1].tolist() == [1.0] * m
    pick = choose(values, params.margin)
    assert candidates[pick] == Candidate(drop=(0,))
    assert first[pick].tolist() == [0, 2]


def test_choose_keeps_the_base_unless_an_alternative_is_clearly_ahead() -> None:
    values = np.array([[1.0, 2.0, 1.0, 2.0], [2.0, 1.0, 2.0, 2.0]])  # ahead by 0.25 +- 0.48
    assert choose(values, 2.0) == 0
    assert choose(values, 0.0) == 1
    assert choose(np.array([[1.0, 1.0], [1.0, 1.0]]), 0.0) == 0  # ties: the base


def recorded(scheduler, cfg, traces, seed: int) -> np.ndarray:
    return run_episode(scheduler, cfg, traces, seed, record=True)["allocation"]


def test_one_candidate_is_hedge(episode_setup) -> None:  # noqa: F811
    cfg, traces = episode_setup
    hedge = recorded(Hedge(predictor="deadline"), cfg, traces, 3)
    alone = recorded(Lookahead(candidates=1, predictor="deadline"), cfg, traces, 3)
    np.testing.assert_array_equal(alone, hedge)


def test_episodes_repeat_by_seed_and_stay_valid(episode_setup) -> None:  # noqa: F811
    cfg, traces = episode_setup
    scheduler = make_scheduler(SPEC)
    sim = ClusterSim(cfg, traces)
    sim.reset(np.random.default_rng(3))
    scheduler.reset(sim, np.random.default_rng([3, 1]))
    log = []
    while not sim.done:
        counts = scheduler.allocate(sim)
        assert counts.sum() <= cfg.num_nodes
        assert (counts <= sim.workload.cap).all()
        assert (counts[sim.status != 1] == 0).all()
        log.append(place(sim, counts))
        sim.tick(log[-1])
    np.testing.assert_array_equal(np.array(log), recorded(make_scheduler(SPEC), cfg, traces, 3))


class Blindfolded(ClusterSim):
    """A simulator that hides the truth while a scheduler decides: the tasks' work and
    every task not yet arrived are garbage, and ``remaining_true`` raises."""

    def poison(self) -> None:
        self.kept = (self.truth, self.workload)
        wl, pending = self.truth, self.status == PENDING
        junk = np.full(len(wl), np.nan)
        seen = dataclasses.replace(
            wl,
            work_true=junk,
            work_sampled=junk,
            size=junk,
            arrival=np.where(pending, -1000, wl.arrival),
            deadline=np.where(pending, -1000, wl.deadline),
            rate=np.where(pending, np.nan, wl.rate),
        )
        self.truth = self.workload = seen

    def restore(self) -> None:
        self.truth, self.workload = self.kept

    def remaining_true(self, tasks: np.ndarray) -> np.ndarray:
        raise AssertionError("the lookahead read the truth")


def test_it_never_reads_the_truth(episode_setup) -> None:  # noqa: F811
    cfg, traces = episode_setup
    sim = Blindfolded(cfg, traces)
    sim.reset(np.random.default_rng(3))
    scheduler = make_scheduler(SPEC)
    scheduler.reset(sim, np.random.default_rng([3, 1]))
    log = []
    while not sim.done:
        sim.poison()
        assign = scheduler.assign(sim)
        sim.restore()
        log.append(assign)
        sim.tick(assign)
    np.testing.assert_array_equal(np.array(log), recorded(make_scheduler(SPEC), cfg, traces, 3))


@pytest.mark.parametrize(
    "spec, words",
    [
        ("lookahead:candidates=0", "candidates=0; expected a whole number in [1, 64]"),
        ("lookahead:horizon=0", "horizon=0; expected a whole number in [1, 256]"),
        ("lookahead:futures=1000", "futures=1000; expected a whole number in [1, 256]"),
        ("lookahead:rollout_quantiles=0", "rollout_quantiles=0"),
        ("lookahead:margin=-1", "margin=-1; expected a number in [0, 100]"),
        ("lookahead:arrivals=psychic", "arrivals='psychic'; expected one of none, seen"),
        ("lookahead:predictor=flow", "predictor='flow'; expected one of cluster, flow+deadline"),
        ("lookahead:predictor=exact:arrivals=seen", "predictor='exact' has none"),
        ("lookahead:confidence=0", "confidence=0; expected a probability in (0, 1]"),
        ("lookahead:depth=3", "unknown parameter 'depth'"),
    ],
)
def test_bad_options_are_refused_by_name(spec, words) -> None:
    with pytest.raises((SpecError, ValueError)) as err:
        make_scheduler(spec)
    assert words in str(err.value)


def test_on_exact_work_one_candidate_is_hedge_on_exact_work(episode_setup) -> None:  # noqa: F811
    """The reference on exact work: every world is the true one, and with one candidate
    it is ``hedge:predictor=exact``; with alternatives it stays valid and repeats by seed."""
    cfg, traces = episode_setup
    hedge = recorded(Hedge(predictor="exact"), cfg, traces, 3)
    alone = recorded(Lookahead(candidates=1, predictor="exact"), cfg, traces, 3)
    np.testing.assert_array_equal(alone, hedge)
    spec = "lookahead:predictor=exact:candidates=3:futures=1:horizon=6:margin=0"
    first = recorded(make_scheduler(spec), cfg, traces, 3)
    np.testing.assert_array_equal(first, recorded(make_scheduler(spec), cfg, traces, 3))
