"""hedge: most expected completions per expected node-tick, from the work distribution.

A planner that decides, every tick, which present tasks to pursue and with how many nodes
from the *distribution* of each task's remaining work, not from a point estimate.  The
distribution (``predictor``) is by default ``cluster``: the one of ``task`` and
``flow+deadline`` that the cluster's history chose for the episode's workload (``mara
history fit`` plays hedge with each on that workload's train episodes and keeps ``task``
unless the other leads, :mod:`mara_agents.planning.history`; the shipped choice is
``task`` on synthetic episodes and ``flow+deadline`` on Philly's days).  ``task`` is the
calibrated remaining-work model (:mod:`flow_predictor.task_work`): a network on
everything a scheduler knows of a task (its window, family, cap, throughput, target, loss
reports, what its deadline says about its size under the cluster's history,
:mod:`flow_predictor.deadline_prior`, and the flow model's samples), recalibrated on the
cluster's history and during the episode on the tasks that end.  ``task-no-flow`` is that
pipeline without the flow model; ``flow+deadline`` the flow model's samples fused with
the deadline prior (users set deadlines from their own estimate of a job's size, so the
deadline is a noisy size estimate from arrival on; the default until the calibrated
model); ``flow`` the flow model alone, ``deadline`` the deadline prior alone.  A
distribution that reads the prior is read as ``quantiles`` (256) evenly spaced quantiles,
so a chance is resolved to 1/256 (the flow model alone: its 32 draws).  Each tick, for
the active tasks in earliest-deadline order:

1. **Explore.** A task the predictor cannot predict yet (``predictor=flow``: fewer than
   :data:`~flow_predictor.remaining.MIN_REPORTS` reports; the deadline prior predicts
   every task) gets a uniform share of the nodes (within its cap, at least one, as LARA
   explores).
2. **Chance of finishing.** For every other task ``k`` and every count ``n`` up to its cap,
   ``p_k(n)``: the share of its remaining-work samples that ``n`` nodes held from now on
   finish by its deadline (a joining node gives nothing in its first tick, speed-up
   ``rate * n**alpha``), and ``c_k(n)``: the node-ticks it then holds, averaged over the
   samples (until it finishes; a sample that misses the deadline is charged ``miss_cost``
   times the time left: 1 is its nodes held to the deadline, and by default the price is
   the one tuned on the cluster's own history,
   :attr:`~mara_agents.planning.history.ClusterHistory.miss_cost`).  A task none of
   whose counts reaches ``p_k(n) >= confidence`` is not pursued.
3. **Admission and counts** (a greedy knapsack on chances): starting from no nodes, the
   step that raises some task's count from ``m`` to ``n`` with the most chance gained per
   node-tick added, ``(p_k(n) - p_k(m)) / (c_k(n) - c_k(m))``, is taken while nodes are
   left and some step gains chance (ties: the earlier deadline, the smaller step).  The
   tasks that get nodes are the kept set.  Pricing by expected node-ticks, not by nodes
   now, is the hedge against arrivals: a large task that would hold nodes for long is
   kept only while no cheaper completions compete for them, and it re-competes every tick
   as the distribution sharpens.  With ``urgency`` ``u > 0`` a count's value is
   ``p_k(n) - u * p'_k(n)`` instead of ``p_k(n)``, where ``p'_k(n)`` is the chance of the
   same count started ``wait`` ticks later (every node cold): what waiting would lose.  A
   task that loses nothing by waiting is then left to the leftover nodes (step 4), and the
   nodes go first to tasks whose deadlines cannot wait.  The pursued test still reads
   ``p_k``.  The wait is longer than a tick because a task passed over now is passed over
   again while the cluster stays busy: on a distribution, what one tick loses is a sliver
   of every task's tail, and weighing it sends nodes to the tasks least sure to finish.
4. **This tick.** Leftover nodes go, round-robin in deadline order, to kept tasks' warm
   nodes, to kept tasks up to their caps, to exploring tasks up to theirs, and to the
   others: idle nodes help nobody.  Moves are priced by the planning itself: the chances
   and node-ticks count the tick a joining node loses.
5. **Light load** (``light``, off by default).  While the cluster's *observed load* is below
   ``light``, the nodes go in deadline order instead, each task its cap (earliest deadline
   first).  The observed load is what the deadlines of the tasks arrived so far imply:
   each one's work at its reference allocation under the deadline prior's median, summed
   and divided by the node-ticks offered since tick 0
   (:meth:`~flow_predictor.deadline_prior.DeadlinePrior.observed_load`).  It reads no
   task's work and not the rate arrivals were drawn at; a distribution without a deadline
   prior (``flow``, ``exact``) has none, and there ``light`` is refused.

``predictor="exact"`` runs the same code on each task's exact remaining
work from its arrival on (``sim.remaining_true``: one sample, a degenerate distribution),
so ``p_k(n)`` is 0 or 1 and nothing explores: each task's step is to its cheapest
deadline-meeting count, taken in order of node-ticks (the fewest first).  The gap between
the two is what prediction costs this planner.

**Assumes** that the simulator's throughput model (``rate``, ``alpha``, the warm-up of a
joining node) is what the cluster does; that its distribution of the work left is
calibrated (tasks are treated as independent; samples are not re-weighted), and so, by
default, that deadlines relate to work as in the tasks the deadline prior was fitted on
(the train split's); that a task holds its count until it finishes or its deadline passes (it
re-plans every tick, so this is only how a plan is priced); and that nodes are the only
shared resource this tick (the knapsack does not check later ticks' capacity: a kept
set's expected node-ticks may exceed what the cluster offers by their deadlines).  It
reads none of the workload generator's parameters (arrival rate, size or slack ranges,
the spread of users' estimates): how deadlines relate to work the deadline prior learned
from the train split's tasks.  Its knobs were chosen on the validation split only
(``docs/baselines.md``).
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Protocol

import numpy as np

from flow_predictor.deadline_prior import DeadlineInformed, DeadlinePrior
from flow_predictor.remaining import PredictionCache, RemainingWork
from mara_agents.planning.hedge_rule import HedgeParams, HedgePlan, plan_counts
from mara_agents.planning.history import (
    CLUSTER,
    WORKLOAD,
    ClusterHistory,
    check_source,
    history_key,
)
from mara_agents.planning.predictors import EXACT, check_predictor
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, edf_order

# What ``predictor=`` may name: the flow model, what deadlines say about work (alone, or
# fused with the flow model), the calibrated remaining-work model that reads every input
# (``task``; ``task-no-flow``: the same pipeline without the flow model), or each task's
# exact remaining work.
# ``cluster``: the one of DISTRIBUTIONS (task, flow+deadline) the cluster's history chose
# for the episode's workload (``mara history fit``).
PREDICTORS = (CLUSTER, "flow+deadline", "flow", "deadline", "task", "task-no-flow", EXACT)
DEFAULT_PREDICTOR = CLUSTER
# which of them read the deadline prior of the cluster's history, and which the flow model
READS_PRIOR = frozenset({CLUSTER, "flow+deadline", "deadline", "task", "task-no-flow"})
READS_FLOW = frozenset({CLUSTER, "flow+deadline", "flow", "task"})
# the calibrated remaining-work models (flow_predictor.task_work) by the name that reads each
TASK_MODELS = frozenset({"task", "task-no-flow"})


class ExactRemaining:
    """Each task's exact remaining work as a one-sample :class:`RemainingWork` from its
    arrival on (the interface of :class:`~flow_predictor.remaining.PredictionCache`)."""

    def clear(self) -> None:
        """Nothing to forget (stateless)."""

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        return RemainingWork(sim.remaining_true(tasks)[:, None], np.zeros(len(tasks), bool))


class Predictions(Protocol):
    """Where the planner's remaining-work distributions come from (the interface of
    :class:`~flow_predictor.remaining.PredictionCache`)."""

    def clear(self) -> None:
        """Forget every task (new episode)."""

    def get(self, sim: Any, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""


class Hedge(Scheduler):
    """The hedge planner (this module's docstring) as a scheduler.

    ``predictor``: ``"cluster"`` (default: the one of ``"task"`` and ``"flow+deadline"``
    the cluster's history chose for the episode's workload), ``"task"`` or
    ``"task-no-flow"`` (the shipped calibrated
    remaining-work model, with or without the flow model's inputs), ``"flow+deadline"`` or
    ``"flow"`` (the shipped flow checkpoint with ``flow_share``'s sample count and refresh
    rule, fused with the deadline prior or alone; all but ``task-no-flow`` read the flow
    model and need the ``[predictor]`` extra), ``"deadline"`` (the deadline prior alone), or
    ``"exact"`` (each task's exact remaining work: the same planner on a degenerate
    distribution).  ``prior``: the deadline prior, ``"cluster"`` (default: that of the
    cluster's own history, both shipped workloads' train tasks drawn under the episode's
    cluster settings, :attr:`ClusterHistory.prior
    <mara_agents.planning.history.ClusterHistory>`), ``"workload"`` (the same, on the
    tasks of the workload the episode runs alone), or a deadline-prior JSON file, for every
    episode.  ``knobs``: the fields of
    :class:`~mara_agents.planning.hedge_rule.HedgeParams` (``confidence``, ``flow_spread``,
    ``quantiles``, ``urgency``, ``wait``, ``miss_cost``, ``light``), each at its default
    there unless given; ``miss_cost="cluster"`` (the default) is the price tuned on the
    cluster's history; ``light`` acts where the distribution reads a deadline prior (0
    elsewhere).

    The cluster's history is handed in (:meth:`use_history`) by whoever runs the episodes;
    a scheduler used on its own reads the history of each episode's cluster
    (:meth:`ClusterHistory.of <mara_agents.planning.history.ClusterHistory.of>`).
    """

    name = "hedge"

    def __init__(
        self, predictor: str = DEFAULT_PREDICTOR, prior: str = CLUSTER, **knobs: float | str
    ) -> None:
        check_predictor("hedge", predictor, PREDICTORS)
        check_source("hedge: prior", prior)
        known = [f.name for f in fields(HedgeParams)]
        unknown = sorted(set(knobs) - set(known))
        if unknown:
            names = ", ".join(["predictor", "prior", *known])
            raise ValueError(f"hedge: unknown parameter {unknown[0]!r}; known: {names}")
        self.params = HedgeParams(**knobs)  # as given: miss_cost may name the cluster's price
        if predictor not in READS_PRIOR and self.params.light:  # no prior: no observed load
            raise ValueError(
                f"hedge: light={knobs['light']!r} reads the cluster's load off the "
                f"deadline prior, but predictor={predictor!r} uses none"
            )
        if predictor in READS_FLOW | TASK_MODELS:
            from mara_agents.extras import require

            require("predictor")  # checked here, in the parent, not in a worker
        self.predictor = predictor
        # the distribution planned on this episode (``cluster``: the history's choice, set
        # per episode)
        self.distribution = predictor
        self.prior_source = prior
        self._file_prior: DeadlinePrior | None = None
        if predictor in READS_PRIOR and prior not in (CLUSTER, WORKLOAD):
            try:  # a file given is read here: a bad file is an error here, not in a worker
                self._file_prior = DeadlinePrior.load(prior)
            except OSError as exc:
                raise ValueError(str(exc)) from None
        elif predictor not in READS_PRIOR and prior != CLUSTER:
            raise ValueError(f"hedge: prior={prior!r} given, but predictor={predictor!r} uses none")
        self.history: ClusterHistory | None = None
        self._flow: PredictionCache | None = None
        self._predictions: Predictions | None = None
        # the predictions of each distribution and prior planned on so far, by their names
        # (they share the flow model's cache)
        self._by_prior: dict[str | None, Predictions] = {}
        # what this episode plans with: the knobs with the cluster's price resolved, and
        # the deadline prior (None without one)
        self.planned = self.params
        self.prior = self._file_prior

    @property
    def reads_history(self) -> bool:
        """Whether its episodes read the cluster's history (its prior or its price)."""
        from_history = self.predictor in READS_PRIOR and self._file_prior is None
        return from_history or self.needs_tuning

    @property
    def needs_tuning(self) -> bool:
        """Whether it plans with the cluster's tuning: its price of a miss, or its choice
        of distribution (``predictor=cluster``)."""
        return self.params.prices_by_cluster or self.predictor == CLUSTER

    def use_history(self, history: ClusterHistory) -> None:
        """Plan with ``history`` (built once by whoever runs the episodes) from the next
        episode on; an episode on another cluster is refused."""
        self.history = history

    def _history_of(self, config: ClusterConfig) -> ClusterHistory:
        if self.history is None:
            return ClusterHistory.of(config)
        if not self.history.describes(config):
            raise ValueError(
                f"hedge: handed the history of cluster {self.history.key} "
                f"({self.history.jobs}), but the episode runs on {history_key(config)} "
                f"({config.jobs or 'none'})"
            )
        return self.history

    def _make_predictions(self, prior: DeadlinePrior | None) -> Predictions:
        if self.distribution == EXACT:
            return ExactRemaining()
        if self.distribution in READS_FLOW and self._flow is None:
            from flow_predictor.checkpoint import load_predictor
            from flow_predictor.remaining import FLOW_SAMPLES, REFRESH

            self._flow = PredictionCache(load_predictor(n_samples=FLOW_SAMPLES), REFRESH)
        if prior is None:
            return self._flow
        if self.distribution in TASK_MODELS:
            from flow_predictor.task_work import (
                SHIPPED_TASK_WORK,
                SHIPPED_TASK_WORK_NO_FLOW,
                TaskWork,
                TaskWorkModel,
            )

            path = SHIPPED_TASK_WORK if self.distribution == "task" else SHIPPED_TASK_WORK_NO_FLOW
            return TaskWork(TaskWorkModel.load(path), prior, self._flow, self.params.quantiles)
        return DeadlineInformed(prior, self._flow, self.params.quantiles, self.params.flow_spread)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        prior = self._file_prior
        if self.reads_history:
            history = self._history_of(sim.config)
            self.planned = (
                self.params.on_cluster(history.price())
                if self.params.prices_by_cluster
                else self.params
            )
            if self.predictor == CLUSTER:
                self.distribution = history.distribution()
            if self.predictor in READS_PRIOR and prior is None:
                prior = history.workload_prior if self.prior_source == WORKLOAD else history.prior
        self.prior = prior
        key = None if prior is None else json.dumps(prior.fitted_on, sort_keys=True)
        key = f"{self.distribution} {key}"
        if key not in self._by_prior:
            self._by_prior[key] = self._make_predictions(prior)
        self._predictions = self._by_prior[key]
        self._predictions.clear()

    def predictions(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining-work distribution of ``tasks`` the planner plans with."""
        return self._predictions.get(sim, tasks)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        return self.plan(sim, order, self.predictions(sim, order))[0]

    def plan(self, sim: Any, order: np.ndarray, rw: RemainingWork) -> tuple[np.ndarray, HedgePlan]:
        """Nodes per task (length = tasks in the episode) for the active tasks ``order``
        (deadline order), whose predictions are ``rw``, and the plan of the predicted ones
        (:func:`~mara_agents.planning.hedge_rule.plan_counts`)."""
        wl = sim.workload
        counts = np.zeros(len(sim.status), np.int64)
        counts[order], plan = plan_counts(
            rw.samples,
            rw.fallback | np.isnan(rw.samples).any(axis=1),
            (wl.deadline[order] - sim.t).astype(np.float64),
            wl.cap[order],
            sim.nodes_now[order],
            wl.rate[order],
            wl.alpha[order],
            sim.config.num_nodes,
            self.planned,
            self.observed_load(sim),
        )
        return counts, plan

    def observed_load(self, sim: Any) -> float | None:
        """The load the arrived tasks' deadlines imply under the prior planned with
        (:meth:`~flow_predictor.deadline_prior.DeadlinePrior.observed_load`), read only
        while ``light`` may act; None without a prior (``flow``, ``exact``)."""
        if not self.planned.light or self.prior is None:
            return None
        return self.prior.observed_load(sim)
