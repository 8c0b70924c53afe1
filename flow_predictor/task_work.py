"""Remaining work that knows the task: one calibrated distribution from arrival to the end.

Every planner reads a task's remaining-work distribution.  The deadline prior
(:mod:`flow_predictor.deadline_prior`) speaks from arrival but tells apart only tasks with
different windows; the flow model (:mod:`flow_predictor.flow`) reads the curve but only
from the third report, and extrapolating a curve to its crossing of the target is
ill-conditioned near a flat part.  This model reads *everything a scheduler knows* about a
task (:data:`FEATURES`):

* what the user allowed: the window ``d - a`` and the work it would do at the reference
  allocation (``scale``, :func:`~flow_predictor.deadline_prior.deadline_scale`);
* the task: its family, parallelism cap, speed-up exponent and throughput, its loss before
  training and its target (the target's depth below the first loss);
* its reports so far: how many, the work done, how far its loss has come towards the
  target (in log loss), and the recent slope of log loss in log work;
* the cluster's own history, as the deadline prior fitted on it reads this task's window
  (its conditional quantiles of remaining work, given the work done);
* the flow model's samples (from the third report on, refreshed as the reports grow by
  :data:`~flow_predictor.remaining.REFRESH`): their quartiles and their share of "never".

Not the time left: the work a task needs does not depend on how it was scheduled, and a
feature of the schedule would carry the choices of the scheduler that played the fitting
episodes into the distribution (and make it move from tick to tick with no new report).

A monotone quantile network (:mod:`flow_predictor.quantile_net`) maps them to
:data:`LEVELS` quantiles of ``log(remaining / scale)``, fitted by pinball loss on the
train split's episodes under several deadline models (``mara predictor task-work``), so
it learns how much to trust each input rather than one cluster's deadline rule.  Its
curves are then recalibrated per family and report count on a history of tasks the flow
model never saw (:class:`~flow_predictor.calibration.Recalibration`) and, during a run,
from the tasks that finish or expire (expiries censored): what the planner reads is calibrated by
construction and stays so when the cluster drifts from its history.

:class:`TaskWork` is the planner's source (the interface of
:class:`~flow_predictor.remaining.PredictionCache`): ``get(sim, tasks)`` gives evenly
spaced quantiles of each task's remaining work.  Numpy and torch (the network is small:
one forward of every active task per tick).
"""

from __future__ import annotations

import bisect
import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_predictor.calibration import BUCKETS, Recalibration, bucket_of, pit, read_curves
from flow_predictor.checkpoint import CheckpointError, load_blob, save_blob
from flow_predictor.deadline_prior import DeadlinePrior, deadline_scale
from flow_predictor.quantile_net import QuantileNet, QuantileNetConfig
from flow_predictor.remaining import MIN_RATIO, PredictionCache, RemainingWork
from mara_env.cluster import ACTIVE, EXPIRED
from mara_env.traces import LOSS_FLOOR
from mara_env.workload import reference_nodes

FORMAT = "mara-task-work"
VERSION = 1
CHECKPOINTS = Path(__file__).with_name("checkpoints")
SHIPPED_TASK_WORK = CHECKPOINTS / "task_work.pt"
# the same pipeline without the flow model (its flow inputs always "not known"): what the
# flow model adds is measured against it
SHIPPED_TASK_WORK_NO_FLOW = CHECKPOINTS / "task_work_no_flow.pt"

FAMILIES = ("lm", "rl", "tabular", "vision")
PRIOR_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)
FLOW_LEVELS = (0.25, 0.5, 0.75)
FEATURES = (
    "log_window",
    "log_scale",
    "log_done",
    "log_throughput",
    "alpha",
    "log_cap",
    "depth",
    "progress",
    "progress_best",
    "progress_half",
    "progress_quarter",
    "slope",
    "slope_known",
    "slope_extrapolation",
    "log_reports",
    *(f"family_{f}" for f in FAMILIES),
    *(f"prior_q{int(100 * q)}" for q in PRIOR_LEVELS),
    "flow_known",
    *(f"flow_q{int(100 * q)}" for q in FLOW_LEVELS),
    "flow_never",
)
FLOW_COLUMNS = slice(FEATURES.index("flow_known"), len(FEATURES))
FAMILY_COLUMNS = slice(
    FEATURES.index(f"family_{FAMILIES[0]}"), FEATURES.index(f"family_{FAMILIES[-1]}") + 1
)
# the network's quantile levels of log(remaining / scale)
N_LEVELS = 64
LEVELS = (np.arange(N_LEVELS) + 0.5) / N_LEVELS
# log ratios are clipped here ("never" and empty windows stay finite inputs)
_CLIP = 12.0


def _log_ratio(work: np.ndarray, scale: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.log(work / scale[:, None]), -_CLIP, _CLIP)


def task_features(
    sim: Any, tasks: np.ndarray, prior: DeadlinePrior, flow: RemainingWork | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tasks x :data:`FEATURES`) rows of what a scheduler knows of ``tasks`` now, their
    ``scale`` (the unit of the model's output) and their report counts.  ``flow``: the
    flow model's remaining-work samples of the same tasks (``None``: not known for any)."""
    tasks = np.asarray(tasks, np.int64)
    wl, n = sim.workload, len(tasks)
    scale = np.maximum(deadline_scale(wl, sim.config, tasks), 1e-9)
    window = (wl.deadline[tasks] - wl.arrival[tasks]).astype(np.float64)
    done = np.asarray(sim.work, np.float64)[tasks]
    n_ref = reference_nodes(wl, sim.config, tasks).astype(np.float64)
    alpha = wl.alpha[tasks]
    log_loss0 = np.log(np.maximum(sim.loss0[tasks], LOSS_FLOOR))
    log_target = np.log(np.maximum(wl.target[tasks], LOSS_FLOOR))
    depth = np.maximum(log_loss0 - log_target, 1e-3)
    log_loss = np.log(np.maximum(sim.reported[tasks], LOSS_FLOOR))
    progress = (log_loss0 - log_loss) / depth
    best = np.array([min(sim.hist_loss[k], default=np.inf) for k in tasks.tolist()])
    progress_best = log_loss0 - np.log(np.maximum(np.minimum(best, sim.loss0[tasks]), LOSS_FLOOR))
    reports = np.array([len(sim.hist_work[k]) for k in tasks], np.int64)
    # how far the loss had come at half and a quarter of the work done: the curve's bend
    # (0 without a report that early)
    earlier = np.zeros((n, 2))
    for i, k in enumerate(tasks.tolist()):
        works = sim.hist_work[k]
        for j, share in enumerate((0.5, 0.25)):
            at = bisect.bisect_right(works, share * done[i]) - 1
            if at >= 0:
                earlier[i, j] = log_loss0[i] - np.log(max(sim.hist_loss[k][at], LOSS_FLOOR))
    # the power law through the last reports, followed to the target: log of the work it
    # leaves, in units of scale (a rough extrapolation the network weighs with the rest)
    slope = sim.slope[tasks]
    falling = slope < -0.01
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.log(np.maximum(done, 1e-12)) + (log_target - log_loss) / np.where(
            falling, slope, -1.0
        )
        left_work = np.exp(np.minimum(total, 700.0)) - done
        extrapolation = np.log(np.maximum(left_work, MIN_RATIO * np.maximum(done, 1e-9)) / scale)
    extrapolation = np.where(falling & (done > 0), np.clip(extrapolation, -_CLIP, _CLIP), 0.0)
    families = np.asarray(sim.task_families())[tasks]
    one_hot = np.stack([families == f for f in FAMILIES], axis=1).astype(np.float64)
    prior_rw = prior.remaining(sim, tasks, N_LEVELS)
    prior_q = _log_ratio(prior_rw.quantiles(PRIOR_LEVELS), scale)
    flow_part = np.zeros((n, 2 + len(FLOW_LEVELS)))
    if flow is not None and n:
        samples = np.asarray(flow.samples, np.float64)
        known = ~flow.fallback & ~np.isnan(samples).any(axis=1)
        s = np.where(known[:, None], samples, 1.0)
        q = _log_ratio(np.quantile(np.minimum(s, 1e300), FLOW_LEVELS, axis=1).T, scale)
        flow_part[:, 0] = known
        flow_part[:, 1:-1] = np.where(known[:, None], q, 0.0)
        flow_part[:, -1] = np.where(known, np.isinf(s).mean(axis=1), 0.0)
    x = np.column_stack(
        [
            np.log(np.maximum(window, 0.5)),
            np.log(scale),
            np.log(done / scale + 1e-3),
            np.log(wl.rate[tasks] * n_ref**alpha),
            alpha,
            np.log(wl.cap[tasks].astype(np.float64)),
            depth,
            np.clip(progress, -1.0, 2.0),
            np.clip(progress_best / depth, -1.0, 2.0),
            np.clip(earlier / depth[:, None], -1.0, 2.0),
            slope,
            falling & (done > 0),
            extrapolation,
            np.log1p(reports),
            one_hot,
            prior_q,
            flow_part,
        ]
    )
    return x, scale, reports


def family_groups(x: np.ndarray) -> np.ndarray:
    """Each feature row's calibration group: its family's index in :data:`FAMILIES`, or
    ``len(FAMILIES)`` (the pooled group) for a family the model was not fitted on."""
    one_hot = np.asarray(x)[:, FAMILY_COLUMNS]
    return np.where(one_hot.any(axis=1), one_hot.argmax(axis=1), len(FAMILIES))


class TaskWorkModel:
    """The fitted pieces: the quantile network and the history's recalibration, and
    whether it reads the flow model."""

    def __init__(
        self,
        net: QuantileNet,
        recalibration: Recalibration,
        uses_flow: bool,
        fitted_on: dict[str, Any],
        config: QuantileNetConfig,
    ) -> None:
        self.net, self.recalibration = net, recalibration
        self.uses_flow, self.fitted_on, self.config = uses_flow, fitted_on, config

    def curves(self, x: np.ndarray) -> np.ndarray:
        """Uncalibrated quantile curves (at :data:`LEVELS`) of log(remaining / scale)."""
        x = np.array(x, np.float64)
        if not self.uses_flow:
            x[:, FLOW_COLUMNS] = 0.0
        return self.net.curves(x)

    def save(self, path: str | os.PathLike) -> None:
        """Write the model (atomically)."""
        blob = {
            "format": FORMAT,
            "version": VERSION,
            "features": list(FEATURES),
            "levels": LEVELS.tolist(),
            "buckets": BUCKETS.tolist(),
            "model_config": self.config.as_dict(),
            "uses_flow": bool(self.uses_flow),
            "fitted_on": self.fitted_on,
            "history": torch.as_tensor(self.recalibration.history),
            "state_dict": self.net.state_dict(),
        }
        save_blob(path, blob)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> TaskWorkModel:
        """The model stored at ``path`` (default: the shipped one, :data:`SHIPPED_TASK_WORK`),
        read once per process while the file is unchanged (every planner and every
        episode's policy view share it: nothing here changes a loaded model; a
        :class:`TaskWork` keeps its run's calibration apart)."""
        path = Path(path) if path is not None else SHIPPED_TASK_WORK
        try:
            stat = path.stat()
        except OSError:
            return cls._read(path)  # the reader names the missing file
        return _read_once(str(path.resolve()), stat.st_mtime_ns, stat.st_size)

    @classmethod
    def _read(cls, path: Path) -> TaskWorkModel:
        """The model stored at ``path``, read and checked."""
        writer = "mara predictor task-work"
        blob = load_blob(path, "remaining-work model", writer)
        if not isinstance(blob, dict) or blob.get("format") != FORMAT:
            raise CheckpointError(
                f"{path}: not a remaining-work model (expected a dict with format={FORMAT!r}, "
                f"written by `{writer}`)"
            )
        if blob.get("version") != VERSION:
            raise CheckpointError(
                f"{path}: remaining-work model version {blob.get('version')!r}; this code "
                f"reads version {VERSION}"
            )
        for key, want in (("features", list(FEATURES)), ("levels", LEVELS.tolist())):
            if blob.get(key) != want:
                raise CheckpointError(
                    f"{path}: its {key} do not match this code's ({len(want)} expected); "
                    f"refit it with `{writer}`"
                )
        try:
            config = QuantileNetConfig(**blob["model_config"])
            net = QuantileNet(len(FEATURES), N_LEVELS, config.hidden, config.depth)
            net.load_state_dict(blob["state_dict"])
            recal = Recalibration(np.asarray(blob["history"], np.float64))
            if len(recal.history) != len(FAMILIES) + 1:
                raise ValueError(f"its calibration has {len(recal.history)} groups")
            return cls(net.eval(), recal, bool(blob["uses_flow"]), dict(blob["fitted_on"]), config)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: a damaged remaining-work model ({exc})") from None


@functools.lru_cache(maxsize=8)
def _read_once(path: str, mtime_ns: int, size: int) -> TaskWorkModel:
    """:meth:`TaskWorkModel._read`, once per file version (its path, time and size)."""
    return TaskWorkModel._read(Path(path))


class TaskWork:
    """Remaining work of a running simulation's tasks from :class:`TaskWorkModel`, its
    calibration updated from the tasks that end (the interface of
    :class:`~flow_predictor.remaining.PredictionCache`).  ``prior``: the cluster's deadline
    prior; ``flow``: the flow model's cache (``None`` for a model without flow inputs)."""

    def __init__(
        self,
        model: TaskWorkModel,
        prior: DeadlinePrior,
        flow: PredictionCache | None,
        n_samples: int,
        online: bool = True,
    ) -> None:
        if model.uses_flow and flow is None:
            raise ValueError("TaskWork: this model reads the flow model; give its cache")
        self.model, self.prior, self.flow = model, prior, flow if model.uses_flow else None
        self.n_samples, self.online = int(n_samples), online
        self.recalibration = Recalibration(model.recalibration.history)
        self.taus = (np.arange(self.n_samples) + 0.5) / self.n_samples
        # per task: (reports, group, curve, work done, scale) of its first prediction in
        # each report bucket, scored once the task ends
        self._open: dict[int, list[tuple[int, int, np.ndarray, float, float]]] = {}

    def clear(self, calibration: bool = True) -> None:
        """Forget every task (a new episode) and, unless ``calibration`` is false, the
        run's calibration updates (every episode of the harness starts from the history's;
        ``calibration=False`` carries them into the next episode, as a cluster's next day
        would: ``benchmarks/calibration_drift.py``)."""
        if self.flow is not None:
            self.flow.clear()
        if calibration:
            self.recalibration.reset()
        self._open.clear()

    def _score_ended(self, sim: Any) -> None:
        """Add the tasks that ended since the last call to the run's calibration."""
        ended = [k for k in self._open if sim.status[k] != ACTIVE]
        for k in ended:
            censored = bool(sim.status[k] == EXPIRED)
            for reports, group, curve, done, scale in self._open.pop(k):
                y = np.log(max(float(sim.work[k]) - done, MIN_RATIO * max(done, 1e-9)) / scale)
                u = float(pit(np.array([y]), curve[None, :], LEVELS)[0])
                self.recalibration.observe(u, reports, group, censored)

    def curves(
        self, sim: Any, tasks: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Uncalibrated curves of ``tasks``, their scales, report counts and groups."""
        flow = self.flow.get(sim, tasks) if self.flow is not None else None
        x, scale, reports = task_features(sim, tasks, self.prior, flow)
        return self.model.curves(x), scale, reports, family_groups(x)

    def get(self, sim: Any, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on: ``n_samples`` evenly
        spaced quantiles of the calibrated distribution."""
        tasks = np.asarray(tasks, np.int64)
        if not len(tasks):
            return RemainingWork(np.zeros((0, self.n_samples)), np.zeros(0, bool))
        if self.online:
            self._score_ended(sim)
        curves, scale, reports, groups = self.curves(sim, tasks)
        if self.online:
            self._remember(sim, tasks, curves, scale, reports, groups)
        at = self.recalibration.levels(reports, groups, self.taus)
        logs = read_curves(curves, LEVELS, at)
        done = np.asarray(sim.work, np.float64)[tasks]
        samples = np.maximum(scale[:, None] * np.exp(logs), MIN_RATIO * done[:, None])
        return RemainingWork(samples, np.zeros(len(tasks), bool))

    def _remember(self, sim, tasks, curves, scale, reports, groups) -> None:
        """Keep each task's first prediction in a report bucket it had none in (reports
        only grow, so its last kept one tells)."""
        buckets = bucket_of(reports)
        done = np.asarray(sim.work, np.float64)[tasks]
        for i, k in enumerate(tasks.tolist()):
            kept = self._open.setdefault(k, [])
            if kept and bucket_of(kept[-1][0]) == buckets[i]:
                continue
            kept.append(
                (int(reports[i]), int(groups[i]), curves[i].copy(), float(done[i]), float(scale[i]))
            )
