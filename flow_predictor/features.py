"""Featurisation for the flow model: prefix -> condition vector, trace -> future target.

Everything is in log space relative to the task's current state:

* ``ref`` = the lowest log-loss reported so far (the task has not reached its target,
  so its target lies below ``ref``);
* condition = the prefix resampled on :data:`COND_GRID` (``log(w / w_c)`` from -4 to 0)
  as two curves relative to ``ref`` (running minimum, and a 5-point moving average of
  the raw log-loss), plus :data:`STAT_NAMES` summary statistics;
* target = the lowest raw log-loss logged after the current work and up to work
  ``w_c * (1 + r)``, relative to ``ref`` and capped at 0, for ``r`` in
  :data:`FUTURE_RATIOS` (remaining work / current work, log-spaced 0.01 … 24).  This
  running minimum is exactly what decides completion: the task completes at the first
  work where it drops to ``<= log eps - ref``.  The flow generates the trajectory's
  steps between grid points (:func:`encode_target`), so its samples decode to monotone
  curves (:func:`decode_target`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from flow_predictor.remaining import LOSS_FLOOR, MIN_RATIO

COND_GRID = np.linspace(-4.0, 0.0, 24)
FUTURE_RATIOS = np.geomspace(MIN_RATIO, 24.0, 32)
_LOG_RATIOS = np.log(FUTURE_RATIOS)
STAT_NAMES = (
    "ref_log_loss",  # lowest log-loss so far / 5
    "last_minus_ref",  # latest raw log-loss above the minimum (noise / plateau)
    "first_minus_ref",  # total drop so far
    "log_reports",  # log(n) / 5
    "coverage",  # log(w_c / w_1) / 4
    "log_interval",  # log(w_c / w_{n-1}): spacing of reports
    "log_work",  # log10(w_c) / 5: absolute scale of work units
    "slope_all",  # power-law exponent b over the whole prefix
    "slope_recent",  # b of a WLS fit with per-report discount RECENT_DISCOUNT
    "slope_last_half",  # b over reports with w >= w_c / 2
    "noise",  # std of raw log-loss around its moving average (last 20 reports)
    "min_age",  # log(w_c / w_argmin): how long since the last improvement
)
COND_DIM = 2 * len(COND_GRID) + len(STAT_NAMES)
# Columns of a condition vector: the running-minimum curve, the moving-average curve, the stats.
COND_MIN = slice(0, len(COND_GRID))
COND_AVERAGE = slice(len(COND_GRID), 2 * len(COND_GRID))
COND_STATS = slice(2 * len(COND_GRID), COND_DIM)
TARGET_DIM = len(FUTURE_RATIOS)
CLIP = 10.0
RECENT_DISCOUNT = 0.8  # per-report discount of the slope_recent feature (fixed: part of the model)


def nan_clip(x: np.ndarray, lo: float, hi: float, nan: float = 0.0) -> np.ndarray:
    """``x`` with NaN replaced by ``nan`` and everything (infinities too) clipped to
    ``[lo, hi]``: ``np.clip(np.nan_to_num(x, nan=nan), lo, hi)`` in two or three array
    operations instead of about ten (this runs on every scheduler tick)."""
    # np.fmax / np.fmin take the number over NaN; np.clip costs twice np.maximum + np.minimum.
    if nan == lo:
        return np.fmin(np.fmax(x, lo), hi)
    if nan == hi:
        return np.fmax(np.fmin(x, hi), lo)
    return np.minimum(np.maximum(np.where(np.isnan(x), nan, x), lo), hi)


def _weighted_slope(x: np.ndarray, y: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Row-wise weighted least-squares exponent ``b`` of ``y = c - b x`` (0 if degenerate).

    ``wt`` may stack several weightings along leading axes (one slope per weighting).
    """
    tot = np.maximum(wt.sum(axis=-1, keepdims=True), 1e-12)
    dx = x - (wt * x).sum(axis=-1, keepdims=True) / tot
    wdx = wt * dx
    sxx = (wdx * dx).sum(axis=-1)
    sxy = (wdx * y).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sxx > 1e-12, -sxy / sxx, 0.0)


def _interp_rows(grid: np.ndarray, u: np.ndarray, curves: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Row-wise ``np.interp(grid, u[i], v[i])`` of each ``v`` in ``curves`` (contiguous, shaped
    as ``u``) for non-decreasing rows ``u``; the brackets are found once for all of them."""
    t, w = u.shape
    if w == 1:
        return [np.repeat(v, len(grid), axis=-1) for v in curves]
    idx = (u[:, None, :] <= grid[None, :, None]).sum(axis=2) - 1
    # Flat indices into the rows: far cheaper than take_along_axis on these tiny arrays.
    j = np.clip(idx, 0, w - 2)
    j += np.arange(0, t * w, w)[:, None]
    flat = u.ravel()
    u0, u1 = flat[j], flat[j + 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        f = nan_clip((grid[None, :] - u0) / (u1 - u0), 0.0, 1.0)
    out = []
    for v in curves:
        flat = v.ravel()
        v0 = flat[j]
        out.append(v0 + f * (flat[j + 1] - v0))
    return out


@functools.lru_cache(maxsize=64)
def _recent_weights(w: int) -> np.ndarray:
    """``RECENT_DISCOUNT ** age`` of the ``w`` columns of a right-aligned prefix."""
    return RECENT_DISCOUNT ** (w - 1 - np.arange(w))


def prefix_features(
    works: Sequence[np.ndarray], losses: Sequence[np.ndarray], chunk: int = 1024
) -> np.ndarray:
    """(n_tasks, COND_DIM) condition vectors; every prefix needs at least two reports."""
    if len(works) > chunk:
        parts = [
            prefix_features(works[i : i + chunk], losses[i : i + chunk], chunk)
            for i in range(0, len(works), chunk)
        ]
        return np.concatenate(parts)
    n = np.array([len(v) for v in works], np.int64)
    if len(works) != len(losses) or any(len(v) != len(lo) for v, lo in zip(works, losses)):
        raise ValueError("works and losses must be sequences of equally long arrays")
    t = len(n)
    if not t:
        return np.zeros((0, COND_DIM), np.float32)
    w = int(n.max())
    first = w - n
    # Right-aligned rows, edge-filled on the left with each task's first report (the curves
    # stay flat there), plus two more columns of edge fill either side for the moving
    # average: one gather from all tasks' reports, logged in one call.
    at = np.clip(np.arange(-2, w + 2)[None, :] - first[:, None], 0, (n - 1)[:, None])
    at += (np.cumsum(n) - n)[:, None]
    x = np.log(np.maximum(np.concatenate(works, dtype=np.float64), 1e-12))[at[:, 2:-2]]
    padded = np.log(np.maximum(np.concatenate(losses, dtype=np.float64), LOSS_FLOOR))[at]
    y = padded[:, 2:-2]
    u = x - x[:, -1:]
    cm = np.minimum.accumulate(y, axis=1)
    ref = cm[:, -1]
    ma = padded[:, :w] + padded[:, 1 : w + 1]
    for i in range(2, 5):
        ma += padded[:, i : i + w]
    ma /= 5.0
    out = np.empty((t, COND_DIM))
    out[:, COND_MIN], out[:, COND_AVERAGE] = _interp_rows(COND_GRID, u, (cm, ma))
    out[:, : 2 * len(COND_GRID)] -= ref[:, None]
    age = w - 1 - np.arange(w)
    vf = (age[None, :] < n[:, None]).astype(np.float64)  # the valid (unpadded) columns
    tail = vf * (age < 20)
    resid = (y - ma) * tail
    cnt = np.maximum(tail.sum(axis=1), 1.0)
    noise = np.sqrt(np.maximum((resid**2).sum(1) / cnt - (resid.sum(1) / cnt) ** 2, 0.0))
    # The padding repeats the first report's work and loss: an argmin landing there reads
    # the same age as the first report itself.
    argmin = np.argmin(y, axis=1)
    weights = np.stack([vf, vf * _recent_weights(w), vf * (u >= -np.log(2.0))])
    slope_all, slope_recent, slope_last_half = _weighted_slope(x, y, weights)
    stats = {
        "ref_log_loss": ref / 5.0,
        "last_minus_ref": y[:, -1] - ref,
        "first_minus_ref": y[:, 0] - ref,
        "log_reports": np.log(np.maximum(n, 1)) / 5.0,
        "coverage": -u[:, 0] / 4.0,
        "log_interval": -u[:, -2] if w > 1 else np.zeros(t),
        "log_work": x[:, -1] / np.log(10.0) / 5.0,
        "slope_all": slope_all,
        "slope_recent": slope_recent,
        "slope_last_half": slope_last_half,
        "noise": noise,
        "min_age": -u[np.arange(t), argmin],
    }
    out[:, COND_STATS] = np.stack([stats[name] for name in STAT_NAMES], axis=1)
    return nan_clip(out, -CLIP, CLIP).astype(np.float32)


def future_targets(
    steps: np.ndarray, loss: np.ndarray, current: float, ref: float
) -> tuple[np.ndarray, np.ndarray]:
    """(target, valid) of one trace seen up to work ``current`` with lowest log-loss ``ref``.

    ``target[h]`` is the lowest log-loss logged in ``(current, current * (1 + r_h)]``
    minus ``ref``, capped at 0; ``valid`` is False beyond the trace's last point.
    """
    y = np.log(np.maximum(loss, LOSS_FLOOR))
    i0 = int(np.searchsorted(steps, current, side="right"))
    ahead = np.minimum.accumulate(y[i0:]) - ref if i0 < len(y) else np.zeros(1)
    w = current * (1.0 + FUTURE_RATIOS)
    j = np.searchsorted(steps, w, side="right") - 1 - i0
    z = np.where(j >= 0, ahead[np.clip(j, 0, len(ahead) - 1)], 0.0)
    return np.minimum(z, 0.0).astype(np.float32), w <= steps[-1]


def reports_at(steps: np.ndarray, loss: np.ndarray, works: np.ndarray) -> np.ndarray:
    """Loss the simulator reports at each work: the last logged point at or before it."""
    j = np.searchsorted(steps, works, side="right") - 1
    return loss[np.maximum(j, 0)]


def encode_target(z: np.ndarray) -> np.ndarray:
    """Trajectory -> its steps between grid points (the flow's sample space)."""
    return np.diff(z, axis=-1, prepend=0.0)


def decode_target(d: np.ndarray) -> np.ndarray:
    """Steps -> monotone non-increasing trajectory (positive steps are clipped to 0)."""
    return np.cumsum(np.minimum(d, 0.0), axis=-1)


def crossing_ratio(traj: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Remaining-work ratio at which each trajectory first drops to ``<= delta``.

    ``traj`` (..., TARGET_DIM) are relative log-loss trajectories on FUTURE_RATIOS,
    ``delta`` (broadcastable to ``traj[..., 0]``) the relative log target.  The crossing
    is interpolated linearly in log ratio; ``inf`` if it is not within the grid.
    """
    traj = np.minimum.accumulate(traj, axis=-1)
    d = np.broadcast_to(delta, traj.shape[:-1])
    below = traj <= d[..., None]
    h = np.argmax(below, axis=-1)
    hit = below[..., -1]  # the running minimum is at its lowest at the end
    lr = _LOG_RATIOS
    hp = np.maximum(h - 1, 0)
    # Flat indices into the (contiguous) trajectories: cheaper than take_along_axis here.
    row = np.arange(0, traj.size, traj.shape[-1]).reshape(h.shape)
    flat = traj.ravel()
    z0, z1 = flat[row + hp], flat[row + h]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = nan_clip((z0 - d) / (z0 - z1), 0.0, 1.0, nan=1.0)
    log_r = np.where(h == 0, lr[0], lr[hp] + frac * (lr[h] - lr[hp]))
    return np.where(hit, np.exp(log_r), np.inf)
