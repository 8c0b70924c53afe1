"""Remaining-work distributions and the interface every loss-curve predictor shares.

A predictor sees, per task, the reports so far (cumulative work ``w_1 < … < w_n`` and
the reported loss at each) and a target loss ``eps``; it returns the distribution of the
**remaining work** until the reported loss first is ``<= eps``, as samples (point
methods return one sample: a degenerate distribution).

Conventions shared by all predictors:

* current work ``w_c`` is the last reported work;
* remaining work is at least ``MIN_RATIO * w_c`` (the task has not reached its target
  yet, so it needs *some* more work; this also avoids log(0) in the metrics);
* ``inf`` means "not reached" (a power law that does not decrease, an asymptote above
  the target, or a flow trajectory that does not cross the target within its horizon);
* ``nan`` together with ``fallback=True`` means "unknown" (fewer than two reports);
* ``fallback[i]`` is True when task ``i``'s prefix was too short for the method
  (fewer than :data:`MIN_REPORTS` reports) and the value came from the fallback.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mara_env.compiled import maybe_njit
from mara_env.traces import LOSS_FLOOR  # one floor for simulator and predictors

MIN_REPORTS = 3
# Flow samples per task: the one default of every user of the flow model (the predictor
# wrapper's features, whose count a policy file records; flow_share, LARA's flow variant;
# the predictor's evaluation).  64 did no better for flow_share than 32 at twice the cost.
FLOW_SAMPLES = 32
# Predict a task again once its reports grew by this fraction: the one default of the
# predictor wrapper and of flow_share (FlowShareParams.refresh).
REFRESH = 0.1
MIN_RATIO = 0.01


@functools.lru_cache(maxsize=32)
def quantile_neighbours(qs: tuple[float, ...], s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted-sample positions below and above each quantile level, and the fraction
    between them (linear interpolation, numpy's default)."""
    pos = np.asarray(qs, np.float64) * (s - 1)
    lo = np.floor(pos).astype(np.int64)
    return lo, np.minimum(lo + 1, s - 1), pos - lo


@dataclass(frozen=True)
class RemainingWork:
    """Per-task samples of remaining work (``inf``: not reached; ``nan``: unknown)."""

    samples: np.ndarray  # (n_tasks, n_samples)
    fallback: np.ndarray  # (n_tasks,) bool

    def quantiles(self, qs: Sequence[float]) -> np.ndarray:
        """(n_tasks, len(qs)) quantiles; ``inf`` where the upper neighbour sample is ``inf``."""
        samples = np.asarray(self.samples, np.float64)
        return sorted_quantiles(samples, *quantile_neighbours(tuple(qs), samples.shape[1]))

    def median(self) -> np.ndarray:
        """(n_tasks,) median remaining work."""
        return self.quantiles([0.5])[:, 0]

    def prob_within(self, budget: np.ndarray | float) -> np.ndarray:
        """(n_tasks,) probability that the remaining work is ``<= budget`` (nan: unknown);
        budgets of shape (n_tasks, m) give (n_tasks, m), a column per budget."""
        b = np.asarray(budget, np.float64)
        columns = b.ndim == 2
        if not columns:
            b = np.ascontiguousarray(np.broadcast_to(b, (len(self.samples),))[:, None])
        p = shares_within(np.asarray(self.samples, np.float64), b)
        return p if columns else p[:, 0]


# The two per-tick reads of every task's samples, compiled where numba is installed (the
# predictor wrapper's features read them for every visible task each tick, flow_share the
# quantiles).
@maybe_njit(cache=True, error_model="numpy")
def sorted_quantiles(
    samples: np.ndarray, lo: np.ndarray, hi: np.ndarray, frac: np.ndarray
) -> np.ndarray:
    """Per row: sort, then linear interpolation between positions ``lo`` and ``hi`` (``inf``
    where the upper neighbour is; nan sorts last, as numpy's sort puts it, so no step
    makes a nan of numbers)."""
    out = np.empty((samples.shape[0], len(lo)))
    for i in range(samples.shape[0]):
        x = np.sort(samples[i])
        for j in range(len(lo)):
            a, b = x[lo[j]], x[hi[j]]
            if frac[j] == 0:
                out[i, j] = a
            elif np.isinf(b):
                out[i, j] = np.inf
            else:
                out[i, j] = a + frac[j] * (b - a)
    return out


@maybe_njit(cache=True)
def shares_within(samples: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Per row and budget column: the share of samples ``<= budget`` (nan if any is nan)."""
    n, s = samples.shape
    out = np.empty((n, budgets.shape[1]))
    for i in range(n):
        unknown = False
        for k in range(s):
            unknown = unknown or np.isnan(samples[i, k])
        for m in range(budgets.shape[1]):
            count = 0
            for k in range(s):
                if samples[i, k] <= budgets[i, m]:
                    count += 1
            out[i, m] = np.nan if unknown else count / s
    return out


class FittedPrefixes(ABC):
    """A predictor's fit of a batch of prefixes; answers for any targets without refitting."""

    current: np.ndarray  # (n_tasks,) current work w_c
    fallback: np.ndarray  # (n_tasks,) bool

    @abstractmethod
    def remaining(self, targets: np.ndarray, tasks: np.ndarray | None = None) -> RemainingWork:
        """Remaining work to reach ``targets[j]`` for task ``tasks[j]`` (default: task j)."""

    def _tasks(self, targets: np.ndarray, tasks: np.ndarray | None) -> np.ndarray:
        if tasks is None:
            if len(targets) != len(self.current):
                raise ValueError(f"{len(targets)} targets for {len(self.current)} tasks")
            return np.arange(len(targets))
        return np.asarray(tasks, np.int64)


class RemainingWorkPredictor(ABC):
    """Predicts remaining work to reach target losses from each task's reports so far."""

    name: str = "predictor"
    # prefixes with fewer reports are unknown (nan samples, fallback) whatever else is in
    # their batch: a cache stores that without calling the predictor
    unknown_below: int = 0

    @abstractmethod
    def fit(self, works: Sequence[np.ndarray], losses: Sequence[np.ndarray]) -> FittedPrefixes:
        """Fit every task's prefix of reports (work, loss)."""

    def fit_batches(
        self, batches: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]]
    ) -> FittedPrefixes:
        """One fit of the prefixes of several batches, rows in order (a predictor whose fit of
        a prefix depends on the prefixes batched with it fits each batch as if alone)."""
        return self.fit([w for b in batches for w in b[0]], [v for b in batches for v in b[1]])

    def predict(
        self,
        works: Sequence[np.ndarray],
        losses: Sequence[np.ndarray],
        targets: np.ndarray,
    ) -> RemainingWork:
        """Remaining-work distribution of every task (``targets``: one eps per task)."""
        return self.fit(works, losses).remaining(np.asarray(targets, np.float64))

    def predict_remaining(
        self,
        works: Sequence[np.ndarray],
        losses: Sequence[np.ndarray],
        targets: np.ndarray,
        quantiles: Sequence[float] = (0.1, 0.5, 0.9),
    ) -> np.ndarray:
        """(n_tasks, n_quantiles) remaining-work quantiles."""
        return self.predict(works, losses, targets).quantiles(quantiles)

    def prob_within(
        self,
        works: Sequence[np.ndarray],
        losses: Sequence[np.ndarray],
        targets: np.ndarray,
        budget: np.ndarray | float,
    ) -> np.ndarray:
        """(n_tasks,) probability of reaching the target within ``budget`` more work."""
        return self.predict(works, losses, targets).prob_within(budget)


def current_work(works: Sequence[np.ndarray]) -> np.ndarray:
    """(n_tasks,) last reported work (nan for a task without reports)."""
    return np.array([w[-1] if len(w) else np.nan for w in works], np.float64)


def pad_prefixes(
    works: Sequence[np.ndarray], losses: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-aligned padding: (log work, log loss, valid) arrays of shape (n_tasks, n_max).

    Right alignment puts every task's latest report in the last column.
    """
    n = np.array([len(w) for w in works], np.int64)
    if len(works) != len(losses) or any(len(w) != len(v) for w, v in zip(works, losses)):
        raise ValueError("works and losses must be sequences of equally long arrays")
    width = max(int(n.max(initial=0)), 1)
    lw = np.zeros((len(n), width))
    ll = np.zeros((len(n), width))
    valid = np.arange(width)[None, :] >= (width - n)[:, None]
    if n.sum():  # every report at once, into the valid (right-aligned) places row by row
        lw[valid] = np.log(np.maximum(np.concatenate(works, dtype=np.float64), 1e-12))
        ll[valid] = np.log(np.maximum(np.concatenate(losses, dtype=np.float64), LOSS_FLOOR))
    return lw, ll, valid


def remaining_from_total(total: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Remaining work from predicted total work, floored at ``MIN_RATIO * current``."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(total), np.nan, np.maximum(total - current, MIN_RATIO * current))


# A cache's predictor: given the simulation and the tasks to predict again, their remaining
# work and the work each prediction counts from (their total work is the sum).
Predict = Callable[[Any, np.ndarray], tuple[RemainingWork, np.ndarray]]


def _reports(sim: Any, tasks: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The reports (work, loss) of ``tasks`` so far."""
    return [np.asarray(sim.hist_work[k]) for k in tasks], [
        np.asarray(sim.hist_loss[k]) for k in tasks
    ]


def _last_work(works: Sequence[np.ndarray]) -> np.ndarray:
    """The work each prediction from these reports counts from (0 without reports)."""
    return np.array([float(w[-1]) if len(w) else 0.0 for w in works])


def first_at_reports(
    sim: Any, tasks: np.ndarray, at: Sequence[int], seen: set[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How a prediction is scored once per task and report count (``benchmarks/``): the
    positions in ``tasks`` of those whose report count is one of ``at`` and was not counted
    before (``seen``: the (task, reports) pairs counted so far, updated here), left out a
    task whose trace never reaches its target; their report counts and their true remaining
    work (the simulator's, for scoring only)."""
    reports = np.array([len(sim.hist_work[k]) for k in tasks], np.int64)
    truth = sim.remaining_true(tasks)
    counted = np.array(
        [
            i
            for i, (k, r) in enumerate(zip(np.asarray(tasks).tolist(), reports.tolist()))
            if r in at and (k, r) not in seen and np.isfinite(truth[i]) and truth[i] > 0
        ],
        np.int64,
    )
    seen.update((int(tasks[i]), int(reports[i])) for i in counted)
    return counted, reports[counted], truth[counted]


def interval_scores(
    samples: np.ndarray, truth: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How a counted prediction is scored (``benchmarks/``): per row of ``samples`` (tasks x
    samples) against its ``truth``, whether the truth lies in the 10-90 % and in the
    25-75 % interval, and the |log(median / truth)|.  "Never" (inf) samples are read as the
    largest float, so quantiles among them stay huge, not nan; a median of 0 is an infinite
    error."""
    q10, q25, q50, q75, q90 = np.quantile(
        np.minimum(samples, 1e300), [0.1, 0.25, 0.5, 0.75, 0.9], axis=1
    )
    with np.errstate(divide="ignore"):
        error = np.abs(np.log(q50 / truth))
    return (q10 <= truth) & (truth <= q90), (q25 <= truth) & (truth <= q75), error


def from_reports(predictor: RemainingWorkPredictor) -> Predict:
    """``predictor`` as a cache's :data:`Predict`: remaining work from the last reported work."""

    def predict(sim: Any, tasks: np.ndarray) -> tuple[RemainingWork, np.ndarray]:
        works, losses = _reports(sim, tasks)
        return predictor.predict(works, losses, sim.workload.target[tasks]), _last_work(works)

    return predict


class PredictionCache:
    """Remaining-work predictions of a running simulation's tasks, refreshed as reports come.

    The one per-task prediction cache: the predictor wrapper, flow_share and the WLS and
    Optimus baselines each keep one.  ``sim`` is anything with ``hist_work``/``hist_loss``
    (per-task report lists), ``work`` (per-task work done) and ``workload.target`` (a
    :class:`mara_env.cluster.ClusterSim`).  ``predictor`` is a
    :class:`RemainingWorkPredictor` (remaining work from each task's last reported work) or
    a :data:`Predict`.  A task is predicted again once its reports grew by ``refresh`` (a
    fraction) and by ``every`` reports since its last prediction, and, with
    ``refit_fallbacks``, after every report while its prediction is a fallback; one
    batched predictor call covers all such tasks (:func:`refresh_together`: those of
    several caches).  :meth:`get` answers "remaining work from now" (the cached samples
    shifted by the work done since the prediction), :meth:`totals` the total work.
    ``refresh=0`` predicts after every report.
    """

    def __init__(
        self,
        predictor: RemainingWorkPredictor | Predict,
        refresh: float = 0.0,
        every: int = 1,
        refit_fallbacks: bool = True,
    ) -> None:
        if refresh < 0:
            raise ValueError(f"refresh must be >= 0 (a fraction of the reports), got {refresh}")
        if every < 1:
            raise ValueError(f"every must be >= 1 (new reports), got {every}")
        is_predictor = isinstance(predictor, RemainingWorkPredictor)
        self.predictor = predictor if is_predictor else None
        self.predict = from_reports(predictor) if is_predictor else predictor
        self.refresh = float(refresh)
        self.every = int(every)
        self.refit_fallbacks = refit_fallbacks
        # per task id: reports and work at its prediction (-1 reports: none yet), the
        # prediction's samples and fallback flag; arrays grown as task ids come
        self._reports = np.full(0, -1, np.int64)
        self._at = np.zeros(0)
        self._fallback = np.zeros(0, bool)
        self._samples: np.ndarray | None = None

    def clear(self) -> None:
        """Forget every task (new episode)."""
        self._reports[:] = -1

    def _room(self, sim: Any) -> None:
        """Rows for every task of ``sim``."""
        need = len(sim.hist_work)
        if need > len(self._reports):
            size = max(need, 2 * len(self._reports), 64)
            grow = size - len(self._reports)
            self._reports = np.concatenate([self._reports, np.full(grow, -1, np.int64)])
            self._at = np.concatenate([self._at, np.zeros(grow)])
            self._fallback = np.concatenate([self._fallback, np.zeros(grow, bool)])
            if self._samples is not None:
                self._samples = np.concatenate(
                    [self._samples, np.zeros((grow, self._samples.shape[1]))]
                )

    def stale(self, sim: Any, tasks: np.ndarray) -> list[int]:
        """The tasks among ``tasks`` to predict again (the refresh rule above)."""
        tasks = np.asarray(tasks, np.int64)
        self._room(sim)
        hist, refit, every, refresh = sim.hist_work, self.refit_fallbacks, self.every, self.refresh
        out = []
        for k, at, fallback in zip(
            tasks.tolist(), self._reports[tasks].tolist(), self._fallback[tasks].tolist()
        ):
            n = len(hist[k])
            if (
                at < 0
                or (refit and fallback and n != at)
                or n - at >= max(every, int(refresh * at))
            ):
                out.append(k)
        return out

    def _store(self, sim: Any, tasks: list[int], rw: RemainingWork, at: np.ndarray) -> None:
        rows = np.asarray(tasks, np.int64)  # stale() made room for them
        if self._samples is None or self._samples.shape[1] != rw.samples.shape[1]:
            if self._samples is not None and (self._reports >= 0).any():
                raise ValueError(
                    f"a prediction of {rw.samples.shape[1]} samples a task after "
                    f"{self._samples.shape[1]}: a cache holds one predictor's predictions"
                )
            self._samples = np.zeros((len(self._reports), rw.samples.shape[1]))
        hist = sim.hist_work
        self._reports[rows] = [len(hist[k]) for k in tasks]
        self._at[rows] = at
        self._samples[rows] = rw.samples
        self._fallback[rows] = rw.fallback

    def _known(self, sim: Any, stale: list[int]) -> list[int]:
        """The tasks of ``stale`` to ask the predictor about; those it cannot know yet (fewer
        than its ``unknown_below`` reports) are stored as unknown, as it would answer."""
        below = self.predictor.unknown_below if self.predictor is not None else 0
        if not below or self._samples is None:  # (the sample count comes with a prediction)
            return stale
        hist, known, unknown = sim.hist_work, [], []
        for k in stale:
            (known if len(hist[k]) >= below else unknown).append(k)
        if unknown:
            rows = np.array(unknown, np.int64)
            self._reports[rows] = [len(hist[k]) for k in unknown]
            self._at[rows] = [float(hist[k][-1]) if len(hist[k]) else 0.0 for k in unknown]
            self._samples[rows] = np.nan
            self._fallback[rows] = True
        return known

    def _predicted(self, sim: Any, tasks: np.ndarray) -> np.ndarray:
        """``tasks`` as task ids, predicting the stale ones first (one call)."""
        tasks = np.asarray(tasks, np.int64)
        stale = self._known(sim, self.stale(sim, tasks))
        if stale:
            self._store(sim, stale, *self.predict(sim, np.asarray(stale, np.int64)))
        return tasks

    def totals(self, sim: Any, tasks: np.ndarray) -> np.ndarray:
        """(n_tasks, n_samples) predicted total work of ``tasks`` (``inf``: not reached)."""
        tasks = self._predicted(sim, tasks)
        if not len(tasks):
            return np.zeros((0, 1))
        return self._samples[tasks] + self._at[tasks][:, None]

    def get(self, sim: Any, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        tasks = self._predicted(sim, tasks)
        if not len(tasks):
            return RemainingWork(np.zeros((0, 1)), np.zeros(0, bool))
        samples = self._samples[tasks]
        done = np.asarray(sim.work, np.float64)[tasks]
        at = self._at[tasks]
        if (done != at).any():  # total = samples + work at prediction; nan and inf stay
            samples = remaining_from_total(samples + at[:, None], done[:, None])
        return RemainingWork(samples, self._fallback[tasks])


def refresh_together(requests: Sequence[tuple[PredictionCache, Any, np.ndarray]]) -> None:
    """Predict the stale tasks (:meth:`PredictionCache.stale`) of every ``(cache, sim,
    tasks)``: one :meth:`~RemainingWorkPredictor.fit_batches` call for all the caches that
    share a predictor, each simulation's tasks one batch (what each cache would have
    predicted on its own).  A cache's :meth:`~PredictionCache.get` of those tasks then
    predicts nothing."""
    by_predictor: dict[int, list[tuple[PredictionCache, Any, list[int]]]] = {}
    for cache, sim, tasks in requests:
        stale = cache._known(sim, cache.stale(sim, tasks))
        if not stale:
            continue
        if cache.predictor is None:
            cache._store(sim, stale, *cache.predict(sim, np.asarray(stale, np.int64)))
        else:
            by_predictor.setdefault(id(cache.predictor), []).append((cache, sim, stale))
    for group in by_predictor.values():
        reports = [_reports(sim, stale) for _, sim, stale in group]
        fit = group[0][0].predictor.fit_batches(reports)
        targets = np.concatenate([sim.workload.target[stale] for _, sim, stale in group])
        rw = fit.remaining(targets)
        row = 0
        for (cache, sim, stale), (works, _) in zip(group, reports):
            rows = slice(row, row + len(stale))
            part = RemainingWork(rw.samples[rows], rw.fallback[rows])
            cache._store(sim, stale, part, _last_work(works))
            row += len(stale)
