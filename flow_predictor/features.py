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
import itertools
from collections.abc import Sequence

import numba
import numpy as np

from flow_predictor.remaining import LOSS_FLOOR, MIN_RATIO

COND_GRID = np.linspace(-4.0, 0.0, 24)
FUTURE_RATIOS = np.geomspace(MIN_RATIO, 24.0, 32)
LOG_RATIOS = np.log(FUTURE_RATIOS)
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
# Columns of a condition vector: the running-minimum curve from 0, the moving-average curve
# from _AVERAGE_AT, then the stats (each at its _STAT column).
_AVERAGE_AT = len(COND_GRID)
TARGET_DIM = len(FUTURE_RATIOS)
CLIP = 10.0
RECENT_DISCOUNT = 0.8  # per-report discount of the slope_recent feature (fixed: part of the model)


@functools.lru_cache(maxsize=64)
def _recent_weights(w: int) -> np.ndarray:
    """``RECENT_DISCOUNT ** age`` for ages ``0 … w - 1`` (the slope_recent weights)."""
    return RECENT_DISCOUNT ** np.arange(w)


_STAT = {name: 2 * len(COND_GRID) + i for i, name in enumerate(STAT_NAMES)}
_S_REF, _S_LAST, _S_FIRST, _S_REPORTS = (
    _STAT[k] for k in ("ref_log_loss", "last_minus_ref", "first_minus_ref", "log_reports")
)
_S_COVERAGE, _S_INTERVAL, _S_WORK = (_STAT[k] for k in ("coverage", "log_interval", "log_work"))
_S_ALL, _S_RECENT, _S_HALF = (_STAT[k] for k in ("slope_all", "slope_recent", "slope_last_half"))
_S_NOISE, _S_AGE = _STAT["noise"], _STAT["min_age"]
_LN10, _HALF_WORK = float(np.log(10.0)), float(-np.log(2.0))
NOISE_REPORTS = 20  # the noise statistic looks at this many latest reports


@numba.njit(cache=True, error_model="numpy")
def _moving_average(y: np.ndarray, p: int) -> float:
    """5-point moving average of ``y`` at position ``p``, edge-filled (``p`` may lie left of 0)."""
    last = len(y) - 1
    total = y[min(max(p - 2, 0), last)]
    for q in range(p - 1, p + 3):
        total += y[min(max(q, 0), last)]
    return total / 5.0


@numba.njit(cache=True, error_model="numpy")
def _slope(x: np.ndarray, y: np.ndarray, wt: np.ndarray) -> float:
    """Weighted least-squares exponent ``b`` of ``y = c - b x`` (0 if degenerate)."""
    tot = max(np.sum(wt), 1e-12)
    xm = np.sum(wt * x) / tot
    wdx = wt * (x - xm)
    sxx = np.sum(wdx * (x - xm))
    return -np.sum(wdx * y) / sxx if sxx > 1e-12 else 0.0


@numba.njit(cache=True, error_model="numpy")
def _condition_rows(
    log_work: np.ndarray,
    log_loss: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    pad: np.ndarray,
    log_reports: np.ndarray,
    recent: np.ndarray,
    grid: np.ndarray,
    out: np.ndarray,
    lowest: np.ndarray,
) -> None:
    """Condition vector of each prefix (its reports ``start[i] : start[i] + count[i]`` of the
    flat logs) into ``out`` (clipped to +-CLIP, NaN as 0), its lowest log-loss into
    ``lowest``.

    ``pad[i]``: the columns by which the prefix is right-aligned in its batch.  Grid points
    left of a prefix's first report read the batch's left-most column, and there the moving
    average is taken over that much edge fill (:func:`prefix_conditions` says why).
    """
    g = len(grid)
    row = np.empty(out.shape[1])
    for i in range(len(count)):
        n, left = count[i], pad[i]
        x = log_work[start[i] : start[i] + n]
        y = log_loss[start[i] : start[i] + n]
        u = x - x[n - 1]
        cm = y.copy()
        for p in range(1, n):
            cm[p] = min(cm[p - 1], y[p])
        ref = lowest[i] = cm[n - 1]
        width = n + left
        for k in range(g):
            # np.interp on the batch's right-aligned row: positions < 0 are its edge fill
            if width == 1:
                row[k], row[_AVERAGE_AT + k] = cm[0], _moving_average(y, 0)
                continue
            below = left if u[0] <= grid[k] else 0
            for p in range(n):
                below += u[p] <= grid[k]
            j = min(max(below - 1, 0), width - 2) - left
            a, b = max(j, 0), max(j + 1, 0)
            f = (grid[k] - u[a]) / (u[b] - u[a])
            f = 0.0 if f != f else min(max(f, 0.0), 1.0)
            row[k] = cm[a] + f * (cm[b] - cm[a])
            ma0, ma1 = _moving_average(y, j), _moving_average(y, j + 1)
            row[_AVERAGE_AT + k] = ma0 + f * (ma1 - ma0)
        row[: _AVERAGE_AT + g] -= ref
        s1 = s2 = 0.0
        for p in range(max(n - NOISE_REPORTS, 0), n):
            r = y[p] - _moving_average(y, p)
            s1 += r
            s2 += r * r
        cnt = float(min(n, NOISE_REPORTS))
        row[_S_NOISE] = np.sqrt(max(s2 / cnt - (s1 / cnt) ** 2, 0.0))
        row[_S_REF] = ref / 5.0
        row[_S_LAST] = y[n - 1] - ref
        row[_S_FIRST] = y[0] - ref
        row[_S_REPORTS] = log_reports[i]
        row[_S_COVERAGE] = -u[0] / 4.0
        row[_S_INTERVAL] = -u[max(n - 2, 0)] if width > 1 else 0.0
        row[_S_WORK] = x[n - 1] / _LN10 / 5.0
        row[_S_ALL] = _slope(x, y, np.ones(n))
        row[_S_RECENT] = _slope(x, y, recent[:n][::-1].copy())
        row[_S_HALF] = _slope(x, y, (u >= _HALF_WORK) * 1.0)
        # the first report reached the lowest loss: an argmin in the edge fill reads the same
        row[_S_AGE] = -u[np.argmin(y)]
        for c in range(len(row)):
            v = row[c]
            out[i, c] = 0.0 if v != v else min(max(v, -CLIP), CLIP)


def prefix_conditions(
    works: Sequence[np.ndarray],
    losses: Sequence[np.ndarray],
    chunk: int | Sequence[int] = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """(n_tasks, COND_DIM) condition vectors and (n_tasks,) ``ref`` (lowest log-loss so far)
    of prefixes of at least two reports.

    Prefixes are featurised in chunks (``chunk``: the size of every chunk, or the sizes of
    consecutive chunks), each right-aligned on its longest prefix.  A grid point left of a
    prefix's first report reads the moving average over the edge fill of that alignment, so
    that one curve depends on how much shorter the prefix is than its chunk's longest (0, 1,
    or more reports): the shipped model was trained so.
    """
    n = np.array([len(v) for v in works], np.int64)
    if len(works) != len(losses) or any(len(v) != len(lo) for v, lo in zip(works, losses)):
        raise ValueError("works and losses must be sequences of equally long arrays")
    out, ref = np.empty((len(n), COND_DIM), np.float32), np.empty(len(n))
    if not len(n):
        return out, ref
    if isinstance(chunk, int):
        starts = list(range(0, len(n), chunk))
        ends = starts[1:] + [len(n)]
    else:
        ends = list(itertools.accumulate(chunk))
        starts = [0, *ends[:-1]]
        if ends[-1] != len(n) or min(chunk) < 1:
            raise ValueError(f"chunk sizes {list(chunk)} do not split {len(n)} prefixes")
    pad = n.max() - n if len(starts) == 1 else _pads(n, starts, ends)
    _condition_rows(
        np.log(np.maximum(np.concatenate(works, dtype=np.float64), 1e-12)),
        np.log(np.maximum(np.concatenate(losses, dtype=np.float64), LOSS_FLOOR)),
        np.cumsum(n) - n,
        n,
        pad,
        np.log(np.maximum(n, 1)) / 5.0,
        _recent_weights(int(n.max())),
        COND_GRID,
        out,
        ref,
    )
    return out, ref


def _pads(n: np.ndarray, starts: list[int], ends: list[int]) -> np.ndarray:
    """How much shorter each prefix is than the longest of its chunk."""
    return np.concatenate([n[a:b].max() - n[a:b] for a, b in zip(starts, ends)])


def prefix_features(
    works: Sequence[np.ndarray], losses: Sequence[np.ndarray], chunk: int | Sequence[int] = 1024
) -> np.ndarray:
    """(n_tasks, COND_DIM) condition vectors (:func:`prefix_conditions`)."""
    return prefix_conditions(works, losses, chunk)[0]


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


@numba.njit(cache=True)
def decode_target(x: np.ndarray, std: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Normalised steps ``x`` (..., TARGET_DIM; float32) -> monotone non-increasing
    trajectory: the steps ``x * std + mean``, positive ones clipped to 0, summed along the
    last axis (float32, as numpy's ``cumsum(minimum(d, 0))`` of them)."""
    flat = x.reshape(-1, x.shape[-1])
    out = np.empty(flat.shape, np.float32)
    for i in range(flat.shape[0]):
        acc = np.float32(0.0)
        for j in range(flat.shape[1]):
            step = flat[i, j] * std[j] + mean[j]
            acc += min(step, np.float32(0.0))
            out[i, j] = acc
    return out.reshape(x.shape)


@numba.njit(cache=True, error_model="numpy")
def crossing_row(traj: np.ndarray, delta: float) -> float:
    """Remaining-work ratio at which one trajectory (on FUTURE_RATIOS) first drops to
    ``<= delta``, interpolated linearly in log ratio; ``inf`` if not within the grid (or
    if the trajectory holds a NaN)."""
    lowest = np.inf
    for v in traj:
        if v != v:
            return np.inf
        lowest = min(lowest, v)
    if not lowest <= delta:
        return np.inf
    z0 = z1 = traj[0]
    h = 0
    while z1 > delta:  # the running minimum's first step at or below delta
        h += 1
        z0, z1 = z1, min(z1, traj[h])
    if h == 0:
        return np.exp(LOG_RATIOS[0])
    frac = (z0 - delta) / (z0 - z1)
    frac = 1.0 if frac != frac else min(max(frac, 0.0), 1.0)
    return np.exp(LOG_RATIOS[h - 1] + frac * (LOG_RATIOS[h] - LOG_RATIOS[h - 1]))


@numba.njit(cache=True)
def _crossing_rows(traj: np.ndarray, delta: np.ndarray, out: np.ndarray) -> None:
    for i in range(len(out)):
        out[i] = crossing_row(traj[i], delta[i])


def crossing_ratio(traj: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Remaining-work ratio at which each trajectory first drops to ``<= delta``.

    ``traj`` (..., TARGET_DIM) are relative log-loss trajectories on FUTURE_RATIOS,
    ``delta`` (broadcastable to ``traj[..., 0]``) the relative log target
    (:func:`crossing_row` for each).
    """
    traj = np.asarray(traj, np.float64)
    shape = traj.shape[:-1]
    rows = np.ascontiguousarray(traj.reshape(-1, traj.shape[-1]))
    d = np.ascontiguousarray(np.broadcast_to(np.asarray(delta, np.float64), shape)).ravel()
    out = np.empty(len(rows))
    _crossing_rows(rows, d, out)
    return out.reshape(shape)
