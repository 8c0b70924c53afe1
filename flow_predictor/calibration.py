"""Quantile recalibration of a remaining-work distribution, per report count, kept online.

A predictive distribution is calibrated when the probability integral transform (PIT)
``u = F(truth)`` of its predictions is uniform.  :class:`Recalibration` holds, per bucket
of report counts (:data:`BUCKETS`: 0, 1, 2, 3-5, 6-10, more), the distribution ``G`` of
the PITs the model gave on a history of tasks, and maps a nominal level ``tau`` to the
level ``G^{-1}(tau)`` of the model's quantile curve that held ``tau`` of the history's
truths (quantile recalibration, Kuleshov et al., ICML 2018; split conformal's guarantee
for every level at once when the history is exchangeable with today's tasks).

``G`` is a histogram of :data:`BINS` bins whose history mass counts as ``prior_weight``
tasks.  :meth:`Recalibration.observe` adds a task that finished (its PIT, weight 1) or
expired (censored: its work is only known to exceed what it did, so its unit of mass is
spread over the bins above its censoring level in proportion to their mass, as the
Kaplan-Meier estimator redistributes a censored case to the right).  A cluster whose
deadlines or curves differ from its history so moves its calibration within a run.
Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# lower edges of the report-count buckets: 0, 1, 2, 3-5, 6-10, 11 and more
BUCKETS = np.array([0, 1, 2, 3, 6, 11])
BINS = 100
# a history counts as this many tasks per bucket against the tasks of today's run
PRIOR_WEIGHT = 50.0


def bucket_of(reports: np.ndarray) -> np.ndarray:
    """Each report count's bucket index (:data:`BUCKETS`)."""
    return np.searchsorted(BUCKETS, np.asarray(reports), side="right") - 1


def pit(values: np.ndarray, curves: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """``F(values)`` per row for quantile ``curves`` (rows ascending) at ``levels``:
    linear between levels, and linear in the outermost gaps' slope beyond them, clipped to
    [0, 1]."""
    values = np.asarray(values, np.float64)
    n, m = curves.shape
    idx = np.clip((curves < values[:, None]).sum(axis=1), 1, m - 1)
    rows = np.arange(n)
    lo, hi = curves[rows, idx - 1], curves[rows, idx]
    width = np.maximum(hi - lo, 1e-12)
    u = levels[idx - 1] + (levels[idx] - levels[idx - 1]) * (values - lo) / width
    return np.clip(u, 0.0, 1.0)


def read_curves(curves: np.ndarray, levels: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Quantile ``curves`` (rows ascending, at ``levels``) read at per-row levels ``at``
    (rows x k): linear between levels, linear in the outermost gaps' slope beyond them."""
    n, m = curves.shape
    idx = np.clip(np.searchsorted(levels, at, side="right"), 1, m - 1)
    rows = np.arange(n)[:, None]
    lo, hi = curves[rows, idx - 1], curves[rows, idx]
    t = (at - levels[idx - 1]) / (levels[idx] - levels[idx - 1])
    return lo + t * (hi - lo)


@dataclass
class Recalibration:
    """Per bucket, a histogram of the PITs of a history (``mass``: buckets x :data:`BINS`,
    each row summing to ``prior_weight``), updated online by :meth:`observe`."""

    history: np.ndarray  # (buckets, BINS): the history's PIT shares per bin
    prior_weight: float = PRIOR_WEIGHT
    mass: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        h = np.asarray(self.history, np.float64)
        if h.shape != (len(BUCKETS), BINS) or not np.isfinite(h).all() or (h < 0).any():
            raise ValueError(
                f"recalibration: history must be {len(BUCKETS)} x {BINS} non-negative shares"
            )
        self.history = h / np.maximum(h.sum(axis=1, keepdims=True), 1e-12)
        self.reset()

    @classmethod
    def fit(cls, u: np.ndarray, reports: np.ndarray, censored: np.ndarray | None = None):
        """The recalibration of a history's PITs ``u`` at report counts ``reports``
        (``censored``: PITs that are only lower bounds), each bucket's histogram started
        uniform (one task's worth) so that a bucket the history lacks stays as predicted."""
        b = bucket_of(reports)
        censored = np.zeros(len(u), bool) if censored is None else np.asarray(censored, bool)
        hist = np.full((len(BUCKETS), BINS), 1.0 / BINS)
        for j in range(len(BUCKETS)):
            m = b == j
            _add(hist[j], np.asarray(u)[m & ~censored], np.asarray(u)[m & censored])
        return cls(hist)

    def reset(self) -> None:
        """Back to the history's calibration (a new run)."""
        self.mass = self.history * self.prior_weight

    def observe(self, u: float, reports: int, censored: bool) -> None:
        """Add one task's PIT (``censored``: a lower bound) at ``reports`` reports."""
        row = self.mass[int(bucket_of(np.array([reports]))[0])]
        if censored:
            _add(row, np.zeros(0), np.array([u]))
        else:
            _add(row, np.array([u]), np.zeros(0))

    def levels(self, reports: np.ndarray, taus: np.ndarray) -> np.ndarray:
        """(tasks x len(taus)) model levels to read for nominal levels ``taus``:
        ``G^{-1}(tau)`` of each task's bucket, linear within bins."""
        edges = np.linspace(0.0, 1.0, BINS + 1)
        cdf = np.concatenate([np.zeros((len(BUCKETS), 1)), np.cumsum(self.mass, axis=1)], axis=1)
        cdf /= cdf[:, -1:]
        table = np.stack([np.interp(taus, c, edges) for c in cdf])
        return table[bucket_of(reports)]


def _add(row: np.ndarray, exact: np.ndarray, censored: np.ndarray) -> None:
    """Add unit masses at PITs ``exact`` and, per censored PIT, a unit mass spread over
    the bins above it in proportion to theirs (``row`` in place)."""
    if len(exact):
        row += np.bincount(np.minimum((exact * BINS).astype(int), BINS - 1), minlength=BINS)
    for c in censored:
        k = min(int(c * BINS), BINS - 1)
        above = row[k:].copy()
        total = above.sum()
        row[k:] += above / total if total > 0 else 1.0 / (BINS - k)
