"""Optimus' baseline: fit ``L = 1 / (a w + b) + c`` by bounded least squares (scipy).

Work is rescaled by the current work ``w_c`` before fitting (so ``a`` and ``b`` are
O(1)), with ``a, b > 0`` and ``0 <= c <= min(L)``.  The fit reaches a target ``eps`` at
``w = (1 / (eps - c) - b) / a``; an asymptote ``c >= eps`` never reaches it: ``inf``.
Prefixes with fewer than three reports (fewer than the parameters) fall back to WLS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from flow_predictor.remaining import (
    MIN_REPORTS,
    FittedPrefixes,
    RemainingWork,
    RemainingWorkPredictor,
    current_work,
    remaining_from_total,
)
from flow_predictor.wls import WLSFit, WLSPredictor


def fit_optimus(work: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """(a, b, c) of ``L = 1/(a w + b) + c`` for one task, ``w`` in units of its last work."""
    x = np.asarray(work, np.float64) / work[-1]
    y = np.asarray(loss, np.float64)
    lo = float(y.min())
    c0 = 0.5 * lo
    b0 = 1.0 / max(y[0] - c0, 1e-6)
    a0 = max(1.0 / max(y[-1] - c0, 1e-6) - b0, 1e-3)

    def resid(p: np.ndarray) -> np.ndarray:
        return 1.0 / (p[0] * x + p[1]) + p[2] - y

    res = least_squares(
        resid,
        x0=[a0, b0, c0],
        bounds=([1e-8, 1e-8, 0.0], [1e8, 1e8, max(lo, 1e-12)]),
        method="trf",
        max_nfev=200,
    )
    a, b, c = res.x
    return float(a), float(b), float(c)


@dataclass(frozen=True)
class OptimusFit(FittedPrefixes):
    """Optimus fits (rows of ``params`` are (a, b, c); nan rows use ``wls``)."""

    params: np.ndarray
    wls: WLSFit
    current: np.ndarray
    fallback: np.ndarray

    def remaining(self, targets: np.ndarray, tasks: np.ndarray | None = None) -> RemainingWork:
        """Point prediction of the remaining work (WLS where the prefix is too short)."""
        k = self._tasks(targets, tasks)
        a, b, c = self.params[k].T
        eps = np.asarray(targets, np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.where(eps > c, (1.0 / (eps - c) - b) / a * self.current[k], np.inf)
        rem = remaining_from_total(total, self.current[k])
        fb = self.fallback[k]
        rem = np.where(fb, self.wls.remaining(eps, k).samples[:, 0], rem)
        return RemainingWork(samples=rem[:, None], fallback=fb)


class OptimusPredictor(RemainingWorkPredictor):
    """Point prediction from :func:`fit_optimus` (one sample per task)."""

    name = "optimus"

    def fit(self, works: Sequence[np.ndarray], losses: Sequence[np.ndarray]) -> OptimusFit:
        """Fit every prefix with at least three reports; shorter ones fall back to WLS."""
        fallback = np.array([len(w) < MIN_REPORTS for w in works], bool)
        params = np.full((len(works), 3), np.nan)
        for i in np.flatnonzero(~fallback):
            params[i] = fit_optimus(np.asarray(works[i], np.float64), np.asarray(losses[i]))
        return OptimusFit(
            params=params,
            wls=WLSPredictor().fit(works, losses),
            current=current_work(works),
            fallback=fallback,
        )
