"""Fitting the remaining-work model: rows from played episodes, the network, its calibration.

:func:`collect` plays episodes of the simulator with a given scheduler and records, every
``every`` ticks, each active task's :func:`~flow_predictor.task_work.task_features` and
its exact remaining work (the truth the simulator knows of a history's tasks: their traces
ran to the end); :func:`fit_model` fits the quantile network on one set of rows and its
recalibration on another (``mara predictor task-work`` fits on the train split and
calibrates on the validation split, whose traces the flow model never trained on, as a
real cluster's history of past tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flow_predictor.calibration import Recalibration, pit
from flow_predictor.deadline_prior import DeadlinePrior
from flow_predictor.quantile_net import QuantileNetConfig, fit_quantile_net
from flow_predictor.remaining import REFRESH, PredictionCache, RemainingWorkPredictor
from flow_predictor.task_work import (
    FAMILIES,
    FLOW_COLUMNS,
    LEVELS,
    TaskWorkModel,
    family_groups,
    task_features,
)
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.traces import TraceSet


@dataclass
class Rows:
    """Recorded tasks: features, ``y = log(remaining / scale)``, report counts, and the
    episode (an integer per row: rows of one episode are not independent)."""

    x: np.ndarray
    y: np.ndarray
    reports: np.ndarray
    episode: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[Rows]) -> Rows:
        """One set of rows from several."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__annotations__))

    def take(self, mask: np.ndarray) -> Rows:
        """The rows where ``mask`` holds."""
        return Rows(self.x[mask], self.y[mask], self.reports[mask], self.episode[mask])


def collect(
    settings: Sequence[tuple[ClusterConfig, DeadlinePrior]],
    traces: TraceSet,
    episodes: int,
    seed: int,
    make_scheduler: Callable[[], Any],
    flow_model: RemainingWorkPredictor,
    every: int = 2,
    progress: Callable[[int], None] | None = None,
) -> Rows:
    """Rows of ``episodes`` episodes of every ``(config, prior)`` of ``settings``, played
    by a fresh ``make_scheduler()`` per episode (episode ``i`` of setting ``j`` seeded
    ``[seed, j, i]``); ``progress`` is called with 1 after each episode."""
    parts, episode = [], 0
    for j, (config, prior) in enumerate(settings):
        flow = PredictionCache(flow_model, REFRESH)
        for i in range(episodes):
            sim = ClusterSim(config, traces)
            sim.reset(np.random.default_rng([seed, j, i]))
            scheduler = make_scheduler()
            scheduler.reset(sim, np.random.default_rng([seed, j, i, 1]))
            flow.clear()
            xs, ys, rs = [], [], []
            while not sim.done:
                tasks = sim.active()
                if len(tasks):
                    rw = flow.get(sim, tasks)  # every tick: the refresh a planner sees
                    if sim.t % every == 0:
                        x, scale, reports = task_features(sim, tasks, prior, rw)
                        truth = sim.remaining_true(tasks)
                        ok = np.isfinite(truth) & (truth > 0)
                        xs.append(x[ok])
                        ys.append(np.log(truth[ok] / scale[ok]))
                        rs.append(reports[ok])
                sim.tick(scheduler.assign(sim))
            if xs:
                x = np.concatenate(xs)
                parts.append(
                    Rows(x, np.concatenate(ys), np.concatenate(rs), np.full(len(x), episode))
                )
            episode += 1
            if progress is not None:
                progress(1)
    return Rows.concat(parts)


def fit_model(
    train: Rows,
    calibrate: Rows,
    uses_flow: bool,
    config: QuantileNetConfig,
    fitted_on: dict[str, Any],
    device: str = "cpu",
    progress: bool = True,
) -> tuple[TaskWorkModel, dict]:
    """The network fitted on ``train`` (a tenth of its episodes, at least one, held out to
    pick the epoch), recalibrated per family and report count on ``calibrate``; and the
    training record."""
    x = np.array(train.x)
    if not uses_flow:
        x[:, FLOW_COLUMNS] = 0.0
    held = np.random.default_rng(config.seed).random(train.episode.max() + 1) < 0.1
    held[-1] |= not held.any()
    val = held[train.episode]
    if val.all():  # one episode: it picks the epoch it was fitted on
        val = np.zeros(len(val), bool)
        x_val, y_val = x, train.y
    else:
        x_val, y_val = x[val], train.y[val]
    net, record = fit_quantile_net(
        x[~val], train.y[~val], LEVELS, config, x_val, y_val, device, progress
    )
    model = TaskWorkModel(net, _uncalibrated(), uses_flow, {}, config)
    u = pit(calibrate.y, model.curves(calibrate.x), LEVELS)
    groups = family_groups(calibrate.x)
    model.recalibration = Recalibration.fit(u, calibrate.reports, groups, len(FAMILIES))
    model.fitted_on = {**fitted_on, "rows": int(len(x)), "calibration_rows": int(len(u))}
    return model, record


def _uncalibrated() -> Recalibration:
    """The identity recalibration (every level read as itself)."""
    return Recalibration.fit(np.zeros(0), np.zeros(0), np.zeros(0), len(FAMILIES))
