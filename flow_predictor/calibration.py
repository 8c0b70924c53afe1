"""Quantile recalibration of a remaining-work distribution, per group and report count,
kept online.

A predictive distribution is calibrated when the probability integral transform (PIT)
``u = F(truth)`` of its predictions is uniform.  :class:`Recalibration` holds, per bucket
of report counts (:data:`BUCKETS`: 0, 1, 2, 3-5, 6-10, more), the distribution ``G`` of
the PITs the model gave on a history of tasks, and maps a nominal level ``tau`` to the
level ``G^{-1}(tau)`` of the model's quantile curve that held ``tau`` of the history's
truths (quantile recalibration, Kuleshov et al., ICML 2018; split conformal's guarantee
for every level at once when the history is exchangeable with today's tasks).  It does
so per group of tasks as well (the remaining-work model's groups are trace families), so
that a group the model is over- or under-confident about is corrected on its own, not
averaged with the others.

Each ``G`` is a histogram of :data:`BINS` bins whose history mass counts as
``prior_weight`` tasks.  :meth:`Recalibration.observe` adds a task that finished (its
PIT, weight 1) or expired (censored: its work is only known to exceed what it did, so
its unit of mass is spread over the bins above its censoring level in proportion to
their mass, as the Kaplan-Meier estimator redistributes a censored case to the right).
A cluster whose deadlines or curves differ from its history so moves its calibration
within a run.
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
    """Per group of tasks (e.g. a trace family) and bucket of report counts, a histogram
    of the PITs of a history (``mass``: groups x buckets x :data:`BINS`, each histogram
    summing to ``prior_weight``), updated online by :meth:`observe`."""

    history: np.ndarray  # (groups, buckets, BINS): the history's PIT shares per bin
    prior_weight: float = PRIOR_WEIGHT
    mass: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        h = np.asarray(self.history, np.float64)
        ok = h.ndim == 3 and h.shape[1:] == (len(BUCKETS), BINS) and len(h) >= 1
        if not ok or not np.isfinite(h).all() or (h < 0).any():
            raise ValueError(
                f"recalibration: history must be groups x {len(BUCKETS)} x {BINS} "
                f"non-negative shares; got shape {h.shape}"
            )
        self.history = h / np.maximum(h.sum(axis=2, keepdims=True), 1e-12)
        self.reset()

    @classmethod
    def fit(
        cls,
        u: np.ndarray,
        reports: np.ndarray,
        groups: np.ndarray,
        n_groups: int,
        censored: np.ndarray | None = None,
    ) -> Recalibration:
        """The recalibration of a history's PITs ``u`` of tasks of ``groups`` (each in
        ``range(n_groups)``) at report counts ``reports`` (``censored``: PITs that are only
        lower bounds); one more group, the last, pools every task (for tasks of no known
        group).  Each histogram starts uniform (one task's worth), so a cell the history
        lacks stays as predicted."""
        u, b = np.asarray(u, np.float64), bucket_of(reports)
        groups = np.asarray(groups, np.int64)
        censored = np.zeros(len(u), bool) if censored is None else np.asarray(censored, bool)
        hist = np.full((n_groups + 1, len(BUCKETS), BINS), 1.0 / BINS)
        for g in range(n_groups + 1):
            member = groups == g if g < n_groups else np.ones(len(u), bool)
            for j in range(len(BUCKETS)):
                m = member & (b == j)
                _add(hist[g, j], u[m & ~censored], u[m & censored])
        return cls(hist)

    @property
    def pooled(self) -> int:
        """The group that pools every task of the history."""
        return len(self.history) - 1

    def reset(self) -> None:
        """Back to the history's calibration (a new run)."""
        self.mass = self.history * self.prior_weight
        self._tables: dict[bytes, np.ndarray] = {}  # levels per cell, by the taus read

    def observe(self, u: float, reports: int, group: int, censored: bool) -> None:
        """Add one task's PIT (``censored``: a lower bound) at ``reports`` reports."""
        row = self.mass[group, int(bucket_of(np.array([reports]))[0])]
        self._tables.clear()
        if censored:
            _add(row, np.zeros(0), np.array([u]))
        else:
            _add(row, np.array([u]), np.zeros(0))

    def levels(self, reports: np.ndarray, groups: np.ndarray, taus: np.ndarray) -> np.ndarray:
        """(tasks x len(taus)) model levels to read for nominal levels ``taus``:
        ``G^{-1}(tau)`` of each task's group and bucket, linear within bins (the table of
        every cell kept until the next :meth:`observe`)."""
        taus = np.asarray(taus, np.float64)
        table = self._tables.get(taus.tobytes())
        if table is None:
            edges = np.linspace(0.0, 1.0, BINS + 1)
            flat = self.mass.reshape(-1, BINS)
            cdf = np.concatenate([np.zeros((len(flat), 1)), np.cumsum(flat, axis=1)], axis=1)
            cdf /= cdf[:, -1:]
            table = np.stack([np.interp(taus, c, edges) for c in cdf])
            self._tables[taus.tobytes()] = table
        return table[np.asarray(groups) * len(BUCKETS) + bucket_of(reports)]


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
