"""LARA's baseline: discounted ridge weighted-least-squares power-law fit (numpy only).

Fits ``log L = log a - b log w`` to a task's reports with weight ``discount**age`` on the
report ``age`` reports old (recent points count more) and a small ridge penalty
``ridge * sum(weights) * b**2`` that keeps fits on a handful of points sane.  The work
needed to reach a target ``eps`` is then ``(a / eps) ** (1 / b)``; a fit with ``b <= 0``
(loss not decreasing) never reaches a lower target: ``inf``.

This module must stay free of torch: schedulers import it directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flow_predictor.remaining import (
    LOSS_FLOOR,
    FittedPrefixes,
    RemainingWork,
    RemainingWorkPredictor,
    current_work,
    pad_prefixes,
    remaining_from_total,
)

DISCOUNT = 0.7  # best of 0.5-0.95 on the shipped library's train split
RIDGE = 1e-6
MIN_SLOPE = 1e-6  # b below this counts as "not decreasing"


@dataclass(frozen=True)
class PowerLaw:
    """Fitted ``L(w) = a * w**(-b)`` per task (nan where fewer than two reports)."""

    log_a: np.ndarray
    b: np.ndarray

    def loss_at(self, work: np.ndarray) -> np.ndarray:
        """Fitted loss at ``work``."""
        return np.exp(self.log_a - self.b * np.log(work))

    def predicted_work(self, target: np.ndarray | float) -> np.ndarray:
        """Total work ``(a / eps) ** (1 / b)`` at which the fit reaches ``target`` (inf: never)."""
        log_eps = np.log(np.maximum(np.asarray(target, np.float64), LOSS_FLOOR))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            total = np.exp(np.minimum((self.log_a - log_eps) / self.b, 700.0))
        total = np.where(self.b > MIN_SLOPE, total, np.inf)
        return np.where(np.isnan(self.b), np.nan, total)


def fit_power_law(
    works: Sequence[np.ndarray],
    losses: Sequence[np.ndarray],
    discount: float = DISCOUNT,
    ridge: float = RIDGE,
) -> PowerLaw:
    """Discounted ridge WLS fit of ``log L = log a - b log w``, batched over tasks."""
    if all(len(w) < 2 for w in works):  # nothing to fit (a scheduler's newest tasks)
        unknown = np.full(len(works), np.nan)
        return PowerLaw(log_a=unknown, b=unknown.copy())
    x, y, valid = pad_prefixes(works, losses)
    age = x.shape[1] - 1 - np.arange(x.shape[1])
    wt = np.where(valid, discount ** age[None, :], 0.0)
    tot = wt.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = (wt * x).sum(axis=1) / tot
        ym = (wt * y).sum(axis=1) / tot
        dx = np.where(valid, x - xm[:, None], 0.0)
        sxx = (wt * dx * dx).sum(axis=1)
        sxy = (wt * dx * (y - ym[:, None])).sum(axis=1)
        b = -sxy / (sxx + ridge * tot)
    enough = valid.sum(axis=1) >= 2
    b = np.where(enough, b, np.nan)
    return PowerLaw(log_a=np.where(enough, ym + b * xm, np.nan), b=b)


@dataclass(frozen=True)
class WLSFit(FittedPrefixes):
    """Power-law fits of a batch of prefixes."""

    law: PowerLaw
    current: np.ndarray
    fallback: np.ndarray

    def remaining(self, targets: np.ndarray, tasks: np.ndarray | None = None) -> RemainingWork:
        """Point prediction ``(a/eps)**(1/b) - w_c`` (nan: fewer than two reports)."""
        k = self._tasks(targets, tasks)
        law = PowerLaw(self.law.log_a[k], self.law.b[k])
        if np.isnan(law.b).all():  # unknown, every one: nan
            return RemainingWork(samples=np.full((len(k), 1), np.nan), fallback=self.fallback[k])
        rem = remaining_from_total(law.predicted_work(targets), self.current[k])
        return RemainingWork(samples=rem[:, None], fallback=self.fallback[k])


class WLSPredictor(RemainingWorkPredictor):
    """Point prediction from :func:`fit_power_law` (one sample per task)."""

    name = "wls"
    unknown_below = 2  # a line needs two reports

    def __init__(self, discount: float = DISCOUNT, ridge: float = RIDGE) -> None:
        self.discount = discount
        self.ridge = ridge

    def fit(self, works: Sequence[np.ndarray], losses: Sequence[np.ndarray]) -> WLSFit:
        """Fit every prefix (unknown with fewer than two reports: ``fallback=True``)."""
        return WLSFit(
            law=fit_power_law(works, losses, self.discount, self.ridge),
            current=current_work(works),
            fallback=np.array([len(w) < 2 for w in works], bool),
        )
