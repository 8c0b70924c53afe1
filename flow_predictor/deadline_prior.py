"""What a task's deadline says about its size: a prior on its remaining work.

Users set deadlines from their own estimate of a job's size, and what that says about the
size is learnt from history, never from the workload generator: a deadline may be padded,
rounded, or say nothing at all.  The work the time a user allowed would do at the task's
reference allocation,

    ``scale_k = rate_k * n_ref_k ** alpha_k * (d_k - a_k)``,

is compared with the work ``W_k`` the task needed, over a history of finished tasks (the
train split's tasks, or a cluster's job history).  The prior is the distribution of
``r = log(W / scale)`` *given the time allowed* ``x = log(d - a)``: the ``neighbours``
history tasks whose ``x`` is nearest the task's (:func:`fit_history`).  Where the deadline
says much (unbiased estimates), ``r`` is narrow at every ``x``; where it says nothing,
the neighbours' ``r`` spreads as the sizes of past tasks do, so the prior becomes the
history of sizes; a menu of round estimates gives each round value its own distribution.
A file without windows (version 1) is one distribution of ``r`` for every task.

It is shipped as small JSON files (made by ``mara predictor deadline-prior``), each the
fit of one history under the default cluster settings: :data:`SHIPPED_PRIOR` on both
shipped workloads' train tasks, and one per workload on its own (:data:`HISTORY_PRIORS`).
Which history a scheduler plans on, and fitting one for other settings, is
:mod:`mara_agents.planning.history`'s.

For a running task it gives remaining-work samples ``scale * exp(r) - work done``,
conditioned on the task not being done yet (``W >`` its work so far); it needs no report,
so it speaks from arrival on.

:class:`DeadlineInformed` combines it with the flow model's samples, when the flow model
has a finite median, as a product of two log-normals (each fitted to its samples' median
and interquartile range): a precision-weighted mean of log remaining work, with the flow
model's log spread scaled by ``flow_spread``.  Without a flow prediction (fewer than three
reports, or a median of "not reached"), the prior alone.

**Assumes** that deadlines relate to work in the cluster where it runs as they did in the
history it was fitted on; where they do not, refit it on your own history
(``docs/baselines.md`` measures a prior fitted under one deadline model on tasks of
another).  Numpy only.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import ndtri

from flow_predictor.remaining import MIN_RATIO, PredictionCache, RemainingWork
from mara_env import json_file
from mara_env.atomic import atomic_write
from mara_env.workload import Workload, reference_nodes

CHECKPOINTS = Path(__file__).with_name("checkpoints")
SHIPPED_PRIOR = CHECKPOINTS / "deadline_prior.json"  # both shipped workloads' history
# the shipped fits of each workload's train history alone (default cluster settings)
HISTORY_PRIORS = {
    None: CHECKPOINTS / "deadline_prior_synthetic.json",
    "philly": CHECKPOINTS / "deadline_prior_philly.json",
}
KIND = "mara-deadline-prior"
VERSION = 2
VERSIONS = (1, 2)  # version 1: one distribution of log ratios, no windows
# quantile levels of the log ratios a version-1 prior file stores
STORED_LEVELS = 257
# history tasks a version-2 file keeps, and the nearest of them a task's prior reads
STORED_TASKS = 4096
NEIGHBOURS = 256
# where log remaining work is read: "never" (inf) as the largest float but one
_TINY, _HUGE = 1e-300, 1e300
# a normal's interquartile range in standard deviations
_IQR_SIGMAS = 1.3489795003921634


def deadline_scale(workload: Workload, config: Any, tasks: np.ndarray) -> np.ndarray:
    """``rate * n_ref**alpha * (deadline - arrival)`` of ``tasks``: the work the time a
    user allowed would do at the task's reference allocation."""
    n_ref = reference_nodes(workload, config, tasks).astype(np.float64)
    allowed = (workload.deadline[tasks] - workload.arrival[tasks]).astype(np.float64)
    return workload.rate[tasks] * n_ref ** workload.alpha[tasks] * allowed


def fit_history(
    work: np.ndarray, scale: np.ndarray, window: np.ndarray, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(log windows, log ratios)`` of at most :data:`STORED_TASKS` history tasks with a
    finite, positive work, scale and window (a seeded draw when there are more), sorted by
    window: what a version-2 prior file stores."""
    work, scale = np.asarray(work, np.float64), np.asarray(scale, np.float64)
    window = np.asarray(window, np.float64)
    ok = np.isfinite(work) & (work > 0) & np.isfinite(scale) & (scale > 0) & (window > 0)
    if ok.sum() < 2:
        raise ValueError(
            f"deadline prior: {int(ok.sum())} task(s) with a finite positive work and "
            "deadline; expected at least 2 to fit a distribution"
        )
    x, r = np.log(window[ok]), np.log(work[ok] / scale[ok])
    if len(x) > STORED_TASKS:
        keep = np.random.default_rng(seed).choice(len(x), STORED_TASKS, replace=False)
        x, r = x[keep], r[keep]
    order = np.lexsort((r, x))
    return x[order], r[order]


@dataclass(frozen=True)
class DeadlinePrior:
    """The distribution of ``log(W / scale)`` and where it came from: with ``log_windows``
    (paired, ascending), per history task, read near each task's window; without, sorted
    quantiles read for every task."""

    log_ratios: np.ndarray
    fitted_on: dict[str, Any]
    log_windows: np.ndarray | None = None

    def __post_init__(self) -> None:
        r = np.asarray(self.log_ratios, np.float64)
        if r.ndim != 1 or len(r) < 2 or not np.isfinite(r).all():
            raise ValueError(
                f"deadline prior: log_ratios must be at least 2 finite numbers; got {len(r)}"
            )
        if self.log_windows is None:
            if (np.diff(r) < 0).any():
                raise ValueError("deadline prior: log_ratios must be in ascending order")
        else:
            x = np.asarray(self.log_windows, np.float64)
            if x.shape != r.shape or not np.isfinite(x).all() or (np.diff(x) < 0).any():
                raise ValueError(
                    "deadline prior: log_windows must be finite, ascending and as many as "
                    f"log_ratios ({len(r)}); got {x.shape[0] if x.ndim else 0}"
                )
            object.__setattr__(self, "log_windows", x)
        object.__setattr__(self, "log_ratios", r)

    def ratios_of(self, window: np.ndarray) -> np.ndarray:
        """Sorted log ratios (tasks x values) the prior gives tasks whose deadline is
        ``window`` ticks after their arrival."""
        r = self.log_ratios
        if self.log_windows is None:
            return np.broadcast_to(r, (len(window), len(r)))
        return self._sorted_runs[self._runs_of(window)]

    def _runs_of(self, window: np.ndarray) -> np.ndarray:
        """The row of :attr:`_sorted_runs` read for each window: the history tasks nearest
        in log window (a run of the sorted windows)."""
        runs = self._sorted_runs
        k = runs.shape[1]
        x = np.log(np.maximum(np.asarray(window, np.float64), 1e-9))
        return np.clip(np.searchsorted(self.log_windows, x) - k // 2, 0, len(runs) - 1)

    @functools.cached_property
    def _sorted_runs(self) -> np.ndarray:
        """Every run of :data:`NEIGHBOURS` consecutive history tasks (by window), its log
        ratios sorted: row ``i`` starts at task ``i`` (computed once, read every tick)."""
        k = min(NEIGHBOURS, len(self.log_ratios))
        return np.sort(sliding_window_view(self.log_ratios, k), axis=1)

    @functools.cached_property
    def _run_medians(self) -> np.ndarray:
        """The median log ratio of each row of :meth:`ratios_of`'s runs (or of the one
        distribution of a prior without windows), computed once."""
        if self.log_windows is None:
            return np.array([np.median(self.log_ratios)])
        return np.median(self._sorted_runs, axis=1)

    def observed_load(self, sim: Any) -> float:
        """The load the tasks that have arrived so far imply, by what their deadlines say:
        the node-ticks each would need at its reference allocation under this prior's
        median, summed over the tasks arrived by tick ``sim.t`` and divided by the node-ticks
        the cluster has offered since tick 0 (``num_nodes * (t + 1)``).  A scheduler knows
        every input: arrivals, deadlines, caps (it reads no task's work, nor the arrival
        rate the workload was drawn with)."""
        wl = sim.workload
        arrived = np.flatnonzero(wl.arrival <= sim.t)
        if not len(arrived):
            return 0.0
        allowed = (wl.deadline[arrived] - wl.arrival[arrived]).astype(np.float64)
        n_ref = reference_nodes(wl, sim.config, arrived).astype(np.float64)
        runs = 0 if self.log_windows is None else self._runs_of(allowed)
        median = self._run_medians[runs]
        demand = n_ref * allowed * np.exp(median)
        return float(demand.sum() / (sim.config.num_nodes * (sim.t + 1)))

    def save(self, path: str | os.PathLike) -> None:
        """Write the prior as JSON (atomically)."""
        blob: dict[str, Any] = {
            "kind": KIND,
            "version": VERSION if self.log_windows is not None else 1,
            "fitted_on": self.fitted_on,
            "log_ratios": [round(float(v), 6) for v in self.log_ratios],
        }
        if self.log_windows is not None:
            blob["log_windows"] = [round(float(v), 6) for v in self.log_windows]
        atomic_write(path, (json.dumps(blob, indent=1) + "\n").encode())

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> DeadlinePrior:
        """The prior stored at ``path`` (default: the shipped one, :data:`SHIPPED_PRIOR`)."""
        path = Path(path) if path is not None else SHIPPED_PRIOR
        try:
            blob = json_file.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"deadline prior {path}: no such file") from None
        except json_file.DuplicateKeyError as e:
            raise ValueError(f"deadline prior {path}: {e}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"deadline prior {path}: not JSON ({e})") from None
        if not isinstance(blob, dict) or blob.get("kind") != KIND:
            raise ValueError(f"deadline prior {path}: expected a file of kind {KIND!r}")
        if blob.get("version") not in VERSIONS:
            raise ValueError(
                f"deadline prior {path}: version {blob.get('version')!r}; expected one of "
                f"{list(VERSIONS)}"
            )
        try:
            windows = blob["log_windows"] if blob["version"] >= 2 else None
            return cls(
                np.asarray(blob["log_ratios"], np.float64),
                dict(blob["fitted_on"]),
                None if windows is None else np.asarray(windows, np.float64),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"deadline prior {path}: {e}") from None

    def remaining(self, sim: Any, tasks: np.ndarray, n_samples: int) -> RemainingWork:
        """``n_samples`` evenly spaced quantiles of each task's remaining work under the
        prior, conditioned on its work so far (a task past every value of the prior: its
        largest value is taken as just ahead, ``MIN_RATIO`` of its work)."""
        tasks = np.asarray(tasks, np.int64)
        done = np.asarray(sim.work, np.float64)[tasks]
        wl = sim.workload
        scale = deadline_scale(wl, sim.config, tasks)
        r = self.ratios_of(wl.deadline[tasks] - wl.arrival[tasks])
        m = r.shape[1]
        # the conditional distribution: the values above the work done, read at evenly
        # spaced levels of what is left of the distribution
        above = (scale[:, None] * np.exp(r) > done[:, None]).sum(axis=1)
        levels = (np.arange(n_samples) + 0.5) / n_samples
        pos = (m - above)[:, None] + levels[None, :] * np.maximum(above - 1, 0)[:, None]
        lo = np.minimum(np.floor(pos).astype(np.int64), m - 1)
        hi = np.minimum(lo + 1, m - 1)
        frac = pos - lo
        r_lo, r_hi = np.take_along_axis(r, lo, axis=1), np.take_along_axis(r, hi, axis=1)
        total = scale[:, None] * np.exp((1 - frac) * r_lo + frac * r_hi)
        samples = np.maximum(total - done[:, None], MIN_RATIO * done[:, None])
        return RemainingWork(samples, np.zeros(len(tasks), bool))


def _sorted_quantile(rows: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(rows, q, axis=1)`` (its default, linear method, to the bit) of rows
    sorted ascending, read at two columns instead of partitioning every row per call."""
    pos = q * (rows.shape[1] - 1)
    lo = int(np.floor(pos))
    t = pos - lo
    a, b = rows[:, lo], rows[:, min(lo + 1, rows.shape[1] - 1)]
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _log_normal(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and spread (interquartile range in standard deviations) of log ``samples``
    per row; ``inf`` samples (never) count as above every finite one, and a median among
    them is ``inf``."""
    logs = np.sort(np.log(np.clip(samples, _TINY, _HUGE)), axis=1)
    q25, q50, q75 = (_sorted_quantile(logs, q) for q in (0.25, 0.5, 0.75))
    never = q50 >= np.log(_HUGE) - 1.0
    return np.where(never, np.inf, q50), (q75 - q25) / _IQR_SIGMAS


def combine(prior: RemainingWork, flow: RemainingWork, flow_spread: float) -> RemainingWork:
    """The product of ``prior``'s and ``flow``'s log-normal fits (rows: tasks), as many
    evenly spaced quantiles as ``prior`` has samples; rows whose flow prediction is unknown (a
    fallback, ``nan``) or whose flow median is ``inf`` keep the prior's samples."""
    mp, sp = _log_normal(prior.samples)
    flow_samples = np.asarray(flow.samples, np.float64)
    known = ~flow.fallback & ~np.isnan(flow_samples).any(axis=1)
    mf, sf = _log_normal(np.where(known[:, None], flow_samples, 1.0))
    use = known & np.isfinite(mf)
    sp = np.maximum(sp, 1e-3)
    sf = np.maximum(np.where(use, sf, 1.0) * flow_spread, 1e-3)
    wp, wf = 1.0 / sp**2, np.where(use, 1.0 / sf**2, 0.0)
    mean = (wp * mp + wf * np.where(use, mf, 0.0)) / (wp + wf)
    sd = 1.0 / np.sqrt(wp + wf)
    n_samples = prior.samples.shape[1]
    z = ndtri((np.arange(n_samples) + 0.5) / n_samples)
    fused = np.exp(mean[:, None] + sd[:, None] * z[None, :])
    return RemainingWork(np.where(use[:, None], fused, prior.samples), np.zeros(len(mp), bool))


class DeadlineInformed:
    """Remaining work from the deadline prior, fused with the flow model's samples where it
    has them (:func:`combine`; the interface of
    :class:`~flow_predictor.remaining.PredictionCache`).  ``cache``: the flow model's
    predictions (``None``: the prior alone); ``flow_spread``: the factor on the flow
    model's log spread, given by the planner whose plan this serves (needed with a cache)."""

    def __init__(
        self,
        prior: DeadlinePrior,
        cache: PredictionCache | None,
        n_samples: int,
        flow_spread: float | None = None,
    ) -> None:
        if cache is not None and flow_spread is None:
            raise ValueError("DeadlineInformed: a flow cache needs its flow_spread (the planner's)")
        self.prior, self.cache = prior, cache
        self.n_samples, self.flow_spread = int(n_samples), flow_spread

    def clear(self) -> None:
        """Forget every task (new episode)."""
        if self.cache is not None:
            self.cache.clear()

    def get(self, sim: Any, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        tasks = np.asarray(tasks, np.int64)
        if not len(tasks):
            return RemainingWork(np.zeros((0, self.n_samples)), np.zeros(0, bool))
        prior = self.prior.remaining(sim, tasks, self.n_samples)
        if self.cache is None:
            return prior
        return combine(prior, self.cache.get(sim, tasks), self.flow_spread)
