"""The throughput model ``work per tick = rate * n**alpha``, estimated from what tasks did.

On a live cluster nobody hands the scheduler a job's ``rate`` and ``alpha``: they are
fitted to the work each job gained at the allocations it has had.  The simulator can
hand schedulers the same kind of estimate (``ClusterConfig(throughput="measured")``) so
that both worlds are compared on the same footing.

Per task, ``log gain = log rate + alpha * log n`` is fitted by least squares over its
observed ticks.  Until a task has been seen at two different allocations its ``alpha``
is the prior; until it has been seen at all its ``rate`` is the geometric mean of the
fitted rates of its group (the tasks of its family), else of every observed task, else
``rate_prior``; a per-task ``rate_prior`` (say, each job's speed measured on one node
before it starts) takes the place of the group's for tasks not yet seen.
"""

from __future__ import annotations

import numpy as np

ALPHA_BOUNDS = (0.0, 1.0)  # sub-linear speed-up, never a slow-down


class ThroughputModel:
    """Running least-squares estimates of every task's ``rate`` and ``alpha``."""

    def __init__(
        self, group: np.ndarray, alpha_prior: float, rate_prior: float | np.ndarray = 1.0
    ) -> None:
        if not ALPHA_BOUNDS[0] <= alpha_prior <= ALPHA_BOUNDS[1]:
            raise ValueError(f"alpha_prior={alpha_prior}: expected a number in {ALPHA_BOUNDS}")
        prior = np.asarray(rate_prior, np.float64)
        if prior.ndim > 1 or (prior.ndim == 1 and prior.shape != np.shape(group)):
            raise ValueError("rate_prior: expected a number or one number per task")
        if not (np.isfinite(prior) & (prior > 0)).all():
            raise ValueError(f"rate_prior={rate_prior}: expected positive numbers")
        self.group = np.asarray(group, np.int64)
        self.alpha_prior = float(alpha_prior)
        self.rate_prior = prior
        n = len(self.group)
        # sufficient statistics of (x = log n, y = log gain) per task
        self._n = np.zeros(n)
        self._sx, self._sy = np.zeros(n), np.zeros(n)
        self._sxx, self._sxy = np.zeros(n), np.zeros(n)

    def observe(self, tasks: np.ndarray, nodes: np.ndarray, gains: np.ndarray) -> None:
        """Record that each of ``tasks`` gained ``gains`` work in one tick on ``nodes``."""
        tasks, nodes, gains = (np.asarray(a) for a in (tasks, nodes, gains))
        ok = (nodes > 0) & (gains > 0) & np.isfinite(gains)
        tasks = tasks[ok]
        x, y = np.log(nodes[ok].astype(np.float64)), np.log(gains[ok].astype(np.float64))
        np.add.at(self._n, tasks, 1.0)
        np.add.at(self._sx, tasks, x)
        np.add.at(self._sy, tasks, y)
        np.add.at(self._sxx, tasks, x * x)
        np.add.at(self._sxy, tasks, x * y)

    def rates(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rate, alpha)`` of every task under the observations so far."""
        seen = self._n > 0
        m = np.maximum(self._n, 1.0)
        mx, my = self._sx / m, self._sy / m
        var = self._sxx / m - mx * mx
        spread = var > 1e-9  # seen at two allocations at least
        alpha = np.full(len(self._n), self.alpha_prior)
        alpha[spread] = (self._sxy[spread] / m[spread] - mx[spread] * my[spread]) / var[spread]
        alpha = np.clip(alpha, *ALPHA_BOUNDS)
        log_rate = my - alpha * mx
        if self.rate_prior.ndim == 1:
            return np.exp(np.where(seen, log_rate, np.log(self.rate_prior))), alpha
        fallback = float(np.log(self.rate_prior))
        if seen.any():
            fallback = float(log_rate[seen].mean())
            groups = self.group[seen]
            width = int(self.group.max()) + 1 if len(self.group) else 0
            total = np.bincount(groups, log_rate[seen], minlength=width)
            count = np.bincount(groups, minlength=width)
            group_mean = np.where(count > 0, total / np.maximum(count, 1), fallback)
            log_rate = np.where(seen, log_rate, group_mean[self.group])
        else:
            log_rate = np.full(len(self._n), fallback)
        return np.exp(log_rate), alpha
