"""LARA and the oracle: WLS-predicted work, explore-then-exploit, EDF with infeasible dropping.

LARA (Wang, Yu, Zhao, Zhou, ICML 2024) reconstructed for discrete nodes with warm-up:
every task's loss curve is fitted online by a discounted ridge weighted-least-squares
power law ``log L = log a - b log w``; the predicted total work to reach the target
``eps`` is ``(a / eps) ** (1 / b)``.  A task first *explores* (a uniform share of nodes
until it has ``explore_reports`` loss reports), then every tick LARA re-plans:
earliest-deadline order, Moore-Hodgson-style dropping of tasks predicted infeasible,
the cheapest deadline-meeting node count for the rest, leftovers to the most urgent.
The oracle runs the same planner on each task's true remaining work.  See
``docs/baselines.md`` for what is taken from the paper and what is our choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flow_predictor.remaining import MIN_REPORTS, PredictionCache, RemainingWork
from flow_predictor.wls import fit_power_law
from mara_agents.planning.predictors import EXACT, check_predictor
from mara_env.cluster import ClusterSim
from mara_env.schedulers import (
    Scheduler,
    edf_order,
    fill_in_order,
    spread,
    ticks_needed,
    warm_nodes,
)

# Tuned on the validation split of the shipped library (benchmarks/tune_lara.py: best mean
# completion over loads 1.0 and 2.0 of 96 grid points; docs/baselines.md).
DEFAULT_DISCOUNT = 0.9
DEFAULT_RIDGE = 0.001
DEFAULT_EXPLORE_REPORTS = 6
DEFAULT_MARGIN = -0.6
# LARA's planner fed the flow model's median (``lara:predictor=flow``): its margin, chosen
# on the validation split (`python benchmarks/tune_baselines.py --scheduler lara --episodes
# 50 --workers 2`: 0.651 ± 0.013 over loads 1 and 2, against 0.605 at margin 0). The best
# point is the grid's edge, where LARA's own grid and ElasticFlow's stop: beyond it every
# task looks finishable on one node and the planner turns into an even share.
FLOW_MARGIN = -0.6
LARA_MARGINS = {"wls": DEFAULT_MARGIN, "flow": FLOW_MARGIN, EXACT: 0.0}


class WorkPredictor:
    """Predicted remaining work per task from its loss reports (fits cached per report)."""

    def __init__(self, discount: float, ridge: float, margin: float, min_reports: int) -> None:
        self.discount = discount
        self.ridge = ridge
        self.margin = margin
        self.min_reports = max(int(min_reports), 2)
        self._fits = PredictionCache(self._fit)

    def reset(self) -> None:
        """Forget all fits (new episode)."""
        self._fits.clear()

    def _fit(self, sim: ClusterSim, tasks: np.ndarray) -> tuple[RemainingWork, np.ndarray]:
        """The cache's predictor: total work (counted from 0) by one batched WLS fit of the
        tasks with ``min_reports`` reports; ``inf`` for the others."""
        total = np.full(len(tasks), np.inf)
        rows = [i for i, k in enumerate(tasks) if len(sim.hist_work[k]) >= self.min_reports]
        if rows:
            ks = tasks[rows]
            fit = fit_power_law(
                [np.asarray(sim.hist_work[k]) for k in ks],
                [np.asarray(sim.hist_loss[k]) for k in ks],
                self.discount,
                self.ridge,
            )
            total[rows] = fit.predicted_work(sim.workload.target[ks])
        return RemainingWork(total[:, None], np.zeros(len(tasks), bool)), np.zeros(len(tasks))

    def total_work(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Predicted total work of ``tasks`` to reach their targets (inf: not predictable)."""
        return self._fits.totals(sim, tasks)[:, 0]

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Predicted remaining work of ``tasks``, inflated by the safety margin."""
        total = self.total_work(sim, tasks)
        return np.maximum(total * (1.0 + self.margin) - sim.work[tasks], 0.0)


# What a planner's ``predictor=`` may name: LARA's WLS fit, the flow model's median, or the
# exact work; the reports a task needs before each predicts it, and (by default) explores
# until: LARA's tuned count for WLS, what the flow model needs, none for exact work.
PREDICTORS = ("wls", "flow", EXACT)
EXPLORE_REPORTS = {"wls": DEFAULT_EXPLORE_REPORTS, "flow": MIN_REPORTS, EXACT: 0}
FEWEST_REPORTS = {"wls": 2, "flow": MIN_REPORTS, EXACT: 0}


class PlannedWork:
    """The remaining work a planner believes each task needs, from the predictor it names:
    its predicted total work scaled by ``1 + margin``, less the work done (at least 0).

    ``wls``: :class:`WorkPredictor` (LARA's fit; tasks with fewer than ``min_reports``
    reports are unpredictable, ``inf``); ``flow``: the median of the flow model's
    remaining-work distribution, obtained as ``flow_share`` obtains it (the shipped
    checkpoint, its sample count and refresh rule; loaded on first use, needs torch);
    ``exact``: ``sim.remaining_true``, the exact work each active task still needs to
    complete (to the first logged point of its trace at or below its target, where the
    simulator completes it); it knows neither future arrivals nor, under
    ``throughput="measured"``, the true speed-up (``docs/baselines.md``).
    """

    def __init__(
        self,
        predictor: str,
        margin: float,
        min_reports: int,
        discount: float = DEFAULT_DISCOUNT,
        ridge: float = DEFAULT_RIDGE,
    ) -> None:
        check_predictor("planned work", predictor, PREDICTORS)
        if isinstance(margin, bool) or not (isinstance(margin, (int, float)) and margin > -1):
            raise ValueError(f"margin={margin!r}; expected a number > -1")
        if predictor == "flow":
            from mara_agents.extras import require

            require("predictor")  # checked here, in the parent, not in a worker
        self.predictor = predictor
        self.margin = float(margin)
        self._wls = WorkPredictor(discount, ridge, 0.0, max(int(min_reports), 2))
        self._flow: PredictionCache | None = None

    def reset(self) -> None:
        """Forget every task (new episode)."""
        self._wls.reset()
        if self.predictor == "flow":
            if self._flow is None:
                from flow_predictor.checkpoint import load_predictor
                from flow_predictor.remaining import FLOW_SAMPLES
                from mara_agents.planning.share_rule import DEFAULTS

                flow = load_predictor(n_samples=FLOW_SAMPLES)
                self._flow = PredictionCache(flow, DEFAULTS.refresh)
            self._flow.clear()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Remaining work of ``tasks`` the planner plans with."""
        done = sim.work[tasks]
        if self.predictor == EXACT:
            total = done + sim.remaining_true(tasks)
        elif self.predictor == "wls":
            total = self._wls.total_work(sim, tasks)
        else:
            total = done + self._flow.get(sim, tasks).median()
        return np.maximum(total * (1.0 + self.margin) - done, 0.0)


@dataclass
class Plan:
    """A planner decision for the tasks it was given (all arrays in that order)."""

    counts: np.ndarray  # nodes this tick
    kept: np.ndarray  # bool: planned to meet its deadline
    target_nodes: np.ndarray  # cheapest deadline-meeting node count (0 if infeasible)


def plan_allocation(
    remaining: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    warm: np.ndarray,
    num_nodes: int,
    capacity: int | None = None,
) -> Plan:
    """Deadline plan for tasks given in earliest-deadline order.

    1. Each task's cheapest node count ``n*`` (fewest node-ticks, warm-up included) that
       finishes ``remaining`` within ``time_left``; none within the cap: dropped.
    2. Moore-Hodgson in EDF order: tasks are admitted one by one; when the kept tasks'
       ``n*`` no longer fit on ``num_nodes`` at once, or their node-tick demand exceeds
       ``num_nodes * time_left`` of the task just added, the kept task with the largest
       ``n*`` (then demand) is dropped.
    3. This tick: kept tasks get ``n*`` in EDF order within ``capacity`` (default all
       nodes); leftover nodes, one at a time round-robin in EDF order, first keep kept
       tasks' warm nodes, then go to kept tasks up to their caps, then to dropped tasks
       (idle nodes help nobody).
    """
    k = len(remaining)
    capacity = num_nodes if capacity is None else capacity
    counts = np.zeros(k, np.int64)
    if k == 0:
        return Plan(counts, np.zeros(0, bool), counts.copy())
    n = np.arange(1, int(cap.max()) + 1)[None, :]
    ticks = ticks_needed(remaining[:, None], n, warm[:, None], rate[:, None], alpha[:, None])
    ok = (n <= cap[:, None]) & (ticks <= time_left[:, None])
    with np.errstate(invalid="ignore"):  # inf remaining work: never ok, its cost unused
        cost = np.where(ok, n * ticks, np.inf)
    best = np.argmin(cost, axis=1)
    demand = cost[np.arange(k), best]
    target = np.where(np.isfinite(demand), best + 1, 0)

    kept = np.zeros(k, bool)
    total = 0.0
    for i in np.flatnonzero(target > 0):
        kept[i] = True
        total += demand[i]
        if target[kept].sum() > num_nodes or total > num_nodes * time_left[i]:
            idx = np.flatnonzero(kept)
            j = int(idx[np.lexsort((demand[idx], target[idx]))[-1]])
            kept[j] = False
            total -= demand[j]

    left = capacity
    for i in np.flatnonzero(kept):
        counts[i] = min(int(target[i]), left)
        left -= counts[i]
    for want in (np.where(kept, np.minimum(warm, cap), 0), np.where(kept, cap, 0), cap):
        left = spread(counts, want, left)
    return Plan(counts, kept, target)


def explore_counts(sim: ClusterSim, tasks: np.ndarray, reports: int) -> np.ndarray:
    """Uniform share (at least one node, within caps) for ``tasks`` still exploring."""
    counts = np.zeros(len(sim.status), np.int64)
    exploring = tasks[[len(sim.hist_work[k]) < reports for k in tasks]]
    if not len(exploring):
        return counts
    share = max(1, sim.config.num_nodes // max(len(tasks), 1))
    return fill_in_order(sim, exploring, np.full(len(exploring), share))


def explore_then_plan(
    sim: ClusterSim,
    explore_reports: int,
    remaining: Callable[[ClusterSim, np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, Plan]:
    """LARA's tick: tasks with fewer than ``explore_reports`` reports explore
    (:func:`explore_counts`), the others, in deadline order, get :func:`plan_allocation`'s
    counts on the nodes left for the ``remaining`` work it says they need.  Returns the
    nodes per task, the planned tasks and their :class:`Plan`."""
    order = edf_order(sim)
    counts = explore_counts(sim, order, explore_reports)
    planned = order[counts[order] == 0]
    wl = sim.workload
    plan = plan_allocation(
        remaining(sim, planned),
        wl.deadline[planned] - sim.t,
        wl.cap[planned],
        wl.rate[planned],
        wl.alpha[planned],
        warm_nodes(sim, planned),
        sim.config.num_nodes,
        capacity=sim.config.num_nodes - int(counts.sum()),
    )
    counts[planned] = plan.counts
    return counts, planned, plan


class WLSScheduler(Scheduler):
    """A scheduler that explores new tasks, then plans with LARA's online WLS predictions."""

    def __init__(
        self,
        discount: float = DEFAULT_DISCOUNT,
        ridge: float = DEFAULT_RIDGE,
        explore_reports: int = DEFAULT_EXPLORE_REPORTS,
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        self.explore_reports = int(explore_reports)
        self.predictor = WorkPredictor(discount, ridge, margin, explore_reports)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.predictor.reset()


class LARA(Scheduler):
    """LARA: WLS power-law prediction, explore-then-exploit, EDF with infeasible dropping.

    ``predictor="flow"`` plans with the flow model's median instead of the WLS fit (MARA's
    predictor inside LARA's planner; its margin and exploration are
    :data:`FLOW_MARGIN` and the flow model's fewest reports unless given).
    """

    name = "lara"

    def __init__(
        self,
        discount: float = DEFAULT_DISCOUNT,
        ridge: float = DEFAULT_RIDGE,
        explore_reports: int | None = None,
        margin: float | None = None,
        predictor: str = "wls",
    ) -> None:
        check_predictor("lara", predictor, PREDICTORS)
        reports = EXPLORE_REPORTS[predictor] if explore_reports is None else int(explore_reports)
        if reports < FEWEST_REPORTS[predictor]:
            raise ValueError(
                f"lara: explore_reports={reports}; predictor {predictor!r} needs at least "
                f"{FEWEST_REPORTS[predictor]}"
            )
        margin = LARA_MARGINS[predictor] if margin is None else margin
        self.explore_reports = reports
        self.work = PlannedWork(predictor, margin, reports, discount, ridge)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.work.reset()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Remaining work the planner believes each of ``tasks`` needs."""
        return self.work.remaining(sim, tasks)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        return explore_then_plan(sim, self.explore_reports, self.remaining)[0]


class Oracle(LARA):
    """LARA's planner fed each task's true remaining work: an upper reference."""

    name = "oracle"

    def __init__(self) -> None:
        super().__init__(explore_reports=0, margin=0.0, predictor=EXACT)

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        return sim.remaining_true(tasks)
