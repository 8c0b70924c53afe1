"""ElasticFlow (Gu et al., ASPLOS 2023): admission on the minimum satisfactory share, then
elastic leftovers by marginal return, on predicted (or, as a reference, true) work."""

from __future__ import annotations

import numpy as np

from mara_agents.baselines.lara import (
    EXPLORE_REPORTS,
    FEWEST_REPORTS,
    PREDICTORS,
    PlannedWork,
    explore_counts,
)
from mara_agents.planning.predictors import EXACT, check_predictor
from mara_agents.planning.share_rule import nodes_needed
from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler, edf_order, spread, warm_nodes

# Chosen on the validation split (docs/baselines.md): `python benchmarks/tune_baselines.py
# --scheduler elasticflow --episodes 50 --workers 2`, mean completion over loads 1 and 2:
# flow with margin -0.6 0.619 ± 0.014, the best WLS point (margin -0.6) 0.595 ± 0.014.
DEFAULT_PREDICTOR = "flow"
# Margin on the predicted total work, per predictor (the best of each in that run); exact
# work needs none.
DEFAULT_MARGINS = {"wls": -0.6, "flow": -0.6, EXACT: 0.0}


def fill_plan(
    remaining: float,
    ticks: int,
    cap: int,
    warm: int,
    rate: float,
    alpha: float,
    free: np.ndarray,
) -> tuple[int, np.ndarray]:
    """Minimum satisfactory share of one task on ``free[τ]`` idle nodes in coming tick ``τ``.

    The fewest nodes ``n`` (1..``cap``) such that holding ``min(n, free[τ])`` nodes in each
    tick finishes ``remaining`` work within ``ticks`` ticks; ``warm`` nodes served it last
    tick and a node that joins gives nothing in its first tick (as in the simulator).
    Returns ``n`` and the nodes it holds in each tick (aligned with ``free``, 0 once done),
    or ``(0, zeros)`` if no ``n`` does.
    """
    use = np.zeros(len(free), np.int64)
    d = min(int(ticks), len(free))
    if d <= 0 or not np.isfinite(remaining):
        return 0, use
    x = np.minimum(np.arange(1, int(cap) + 1)[:, None], free[None, :d])
    held = np.minimum(x, np.concatenate([np.full((len(x), 1), warm), x[:, :-1]], axis=1))
    done = (np.cumsum(rate * held**alpha, axis=1) >= remaining * (1 - 1e-9)) & (held > 0)
    fits = np.flatnonzero(done.any(axis=1))
    if not len(fits):
        return 0, use
    i = int(fits[0])
    end = int(done[i].argmax()) + 1
    use[:end] = x[i, :end]
    return i + 1, use


def plan_shares(
    remaining: np.ndarray,
    ticks: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    free: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """ElasticFlow's progressive filling: tasks in the given (deadline) order each take their
    :func:`fill_plan` share of the nodes the earlier ones leave in every coming tick.

    Returns each task's nodes this tick and whether its deadline is met (0 and False for a
    task that no share satisfies: it reserves nothing).
    """
    free = free.copy()
    now = np.zeros(len(remaining), np.int64)
    met = np.zeros(len(remaining), bool)
    for i in range(len(remaining)):
        n, use = fill_plan(remaining[i], ticks[i], cap[i], warm[i], rate[i], alpha[i], free)
        if n:
            free -= use
            now[i], met[i] = use[0], True
    return now, met


def finish_time(
    remaining: np.ndarray, nodes: np.ndarray, warm: np.ndarray, rate: np.ndarray, alpha: np.ndarray
) -> np.ndarray:
    """Predicted ticks to do ``remaining`` work on ``nodes`` nodes, continuous (for marginal
    returns): nodes beyond the ``warm`` ones give nothing in their first tick; inf on 0 nodes."""
    speed = rate * np.maximum(nodes, 1) ** alpha
    first = rate * np.minimum(nodes, warm) ** alpha  # work in the coming tick
    with np.errstate(invalid="ignore"):  # inf remaining work: inf either way
        grow = 1.0 + np.maximum(remaining - first, 0.0) / speed
        t = np.where(nodes <= warm, remaining / speed, grow)
    return np.where(nodes > 0, t, np.inf)


def marginal_fill(
    counts: np.ndarray,
    remaining: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    left: int,
) -> int:
    """Add nodes to ``counts`` one at a time, each to the task whose :func:`finish_time` drops
    the most (ties: the first); stops when no task under its cap gains.  Returns nodes left."""
    while left > 0 and len(counts):
        after = finish_time(remaining, counts + 1, warm, rate, alpha)
        gain = finish_time(remaining, counts, warm, rate, alpha) - after
        gain = np.where(np.isfinite(after) & (counts < cap), gain, -np.inf)
        i = int(np.argmax(gain))
        if not gain[i] > 0:
            break
        counts[i] += 1
        left -= 1
    return left


class ElasticFlow(Scheduler):
    """ElasticFlow (Gu, Zhao, Zhong, et al., "ElasticFlow: An Elastic Serverless Training
    Platform for Distributed Deep Learning", ASPLOS 2023), on predicted work.

    What it does here, every tick (tasks in deadline order):

    1. A task with fewer than ``explore_reports`` loss reports explores: LARA's uniform
       share (:func:`~mara_agents.baselines.lara.explore_counts`), before anything else.
    2. **Admission control.**  Once a task can be predicted it is admitted or rejected,
       once, as ElasticFlow decides on submission: it is admitted if its *minimum
       satisfactory share* (the fewest nodes, within its cap, that finish its predicted
       remaining work by its deadline given the ``r·n^α`` speed-up, warm-up counted;
       :func:`fill_plan`) fits beside the admitted tasks, i.e. if ElasticFlow's
       progressive filling (:func:`plan_shares`: in deadline order, each task takes its
       minimum share of the nodes the earlier ones leave in every coming tick) meets its
       deadline without making an admitted task that met its deadline miss it; else it is
       rejected.  An admitted task whose prediction later says that even its cap cannot
       finish it by its deadline is rejected then.
    3. Admitted tasks get this tick's nodes of the progressive filling (guaranteed).
    4. **Elastic leftovers** go one node at a time to the admitted task whose predicted
       remaining time drops the most (:func:`marginal_fill`).  Nodes that no admitted task
       gains from (each is at its cap or predicted to finish within the tick) go
       round-robin in deadline order up to the caps, first to admitted tasks (their
       predictions were short), then to rejected ones: rejected tasks are not dropped
       outright but served like the paper's best-effort jobs, only with nodes no admitted
       task takes (an idle node helps nobody, and predictions can be wrong).

    ``predictor``: ``"flow"`` (default, chosen on validation: the median of the flow
    model's remaining-work distribution, obtained as ``flow_share`` does; needs torch),
    ``"wls"`` (LARA's :class:`~mara_agents.baselines.lara.WorkPredictor`, with LARA's tuned
    discount and ridge; torch-free) or ``"exact"`` (``sim.remaining_true``: the paper's
    known job sizes; an upper reference).
    ``margin``: the predicted total work is scaled by ``1 + margin`` (default per predictor,
    :data:`DEFAULT_MARGINS`); ``explore_reports``: default per predictor,
    :data:`EXPLORE_REPORTS`.

    Adaptations: decisions at tick boundaries, where the paper re-plans on arrivals and
    completions, and a tick is its time slot; discrete nodes, one at a time, where the
    paper allocates GPUs in powers of two with buddy placement against topology effects,
    which have no counterpart here; the job size is unknown, so the minimum share is
    planned on a prediction re-made as reports come, and a task is admitted only once it
    can be predicted, not on arrival; the re-assignment cost (a joining node's first tick
    gives nothing) enters both the minimum share and the marginal return; the speed-up is
    the task's known ``n^α`` curve, which the paper measures per job.
    """

    name = "elasticflow"

    def __init__(
        self,
        predictor: str = DEFAULT_PREDICTOR,
        margin: float | None = None,
        explore_reports: int | None = None,
    ) -> None:
        check_predictor("elasticflow", predictor, PREDICTORS)
        margin = DEFAULT_MARGINS.get(predictor, 0.0) if margin is None else margin
        try:  # PlannedWork checks the predictor and the margin
            self.work = PlannedWork(predictor, margin, FEWEST_REPORTS.get(predictor, 0))
        except ValueError as exc:
            raise ValueError(f"elasticflow: {exc}") from None
        fewest = FEWEST_REPORTS[predictor]
        reports = EXPLORE_REPORTS[predictor] if explore_reports is None else explore_reports
        if isinstance(reports, bool) or not (isinstance(reports, int) and reports >= fewest):
            raise ValueError(
                f"elasticflow: explore_reports={reports!r}; expected a whole number >= "
                f"{fewest} (what predictor {predictor!r} needs)"
            )
        self.predictor = predictor
        self.margin = float(margin)
        self.explore_reports = reports

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.admitted = np.zeros(len(sim.status), bool)
        self.rejected = np.zeros(len(sim.status), bool)
        self.work.reset()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Predicted remaining work of ``tasks``, their total work scaled by ``1 + margin``
        (:class:`~mara_agents.baselines.lara.PlannedWork`)."""
        return self.work.remaining(sim, tasks)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        counts = explore_counts(sim, order, self.explore_reports)
        known = order[[len(sim.hist_work[k]) >= self.explore_reports for k in order]]
        if not len(known):
            return counts
        wl, num_nodes = sim.workload, sim.config.num_nodes
        rem = self.remaining(sim, known)
        ticks = wl.deadline[known] - sim.t
        cap, warm = wl.cap[known], warm_nodes(sim, known)
        rate, alpha = wl.rate[known], wl.alpha[known]
        free = np.full(int(ticks.max()), num_nodes, np.int64)
        free[0] -= int(counts.sum())  # exploring tasks hold these nodes this tick
        alone = nodes_needed(rem, ticks, cap, warm, rate, alpha) > 0
        self.rejected[known[~alone]] = True
        self.admitted[known[~alone]] = False

        def plan(member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return plan_shares(*(a[member] for a in (rem, ticks, cap, warm, rate, alpha)), free)

        adm = self.admitted[known]
        share, met = np.zeros(len(known), np.int64), np.zeros(len(known), bool)
        share[adm], met[adm] = plan(adm)
        for i in np.argsort(known):  # candidates in arrival order, as submissions come
            if adm[i] or self.rejected[known[i]]:
                continue
            trial = adm.copy()
            trial[i] = True
            got_share, got = np.zeros(len(known), np.int64), np.zeros(len(known), bool)
            got_share[trial], got[trial] = plan(trial)
            if got[i] and not (met & ~got).any():
                adm, share, met = trial, got_share, got
            self.admitted[known[i]] = adm[i]
            self.rejected[known[i]] = not adm[i]

        left = int(free[0] - share.sum())
        n = share[adm]
        left = marginal_fill(n, rem[adm], cap[adm], warm[adm], rate[adm], alpha[adm], left)
        share[adm] = n
        # Nodes no admitted task gains from (each at its cap or predicted to finish within
        # the tick): to admitted tasks (predictions may be short), then to rejected ones,
        # round-robin in deadline order; an idle node helps nobody.
        for group in (adm, ~adm):
            n = share[group]
            left = spread(n, cap[group], left)
            share[group] = n
        counts[known] = share
        return counts
