"""Replaying a jobs table (:mod:`mara_env.job_logs`) by day: one day of a split is one
episode's jobs, thinned to the load.

The semantics are in ``docs/jobs.md`` and the ``ClusterConfig`` docstring.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from mara_env.config import ClusterConfig
from mara_env.job_logs import DAY_S, JobsError, jobs_path, read_jobs


@dataclass(frozen=True)
class SplitDays:
    """The jobs of one split, grouped by day (rows of day ``i``: ``offsets[i]:offsets[i+1]``)."""

    dates: np.ndarray
    offsets: np.ndarray
    time_of_day: np.ndarray  # seconds since the day's start
    duration_s: np.ndarray
    gpus: np.ndarray
    deadline_in: np.ndarray  # seconds from submission to the deadline (nan: none given)


@functools.lru_cache(maxsize=8)
def _split_days(path: str, mtime: float, split: str) -> SplitDays:
    df = read_jobs(path)
    if split != "all":
        df = df[df["split"] == split]
    if not len(df):
        raise JobsError(f"{path}: no day of the trace is in split {split!r}")
    day = df["day"].to_numpy(np.int64)
    starts = np.flatnonzero(np.r_[True, day[1:] != day[:-1]])
    submit = df["submit_s"].to_numpy(np.float64)
    deadline = df["deadline_s"].to_numpy(np.float64) if "deadline_s" in df else np.nan
    return SplitDays(
        dates=df["date"].to_numpy()[starts],
        offsets=np.r_[starts, len(df)].astype(np.int64),
        time_of_day=submit - day * DAY_S,
        duration_s=df["duration_s"].to_numpy(np.float64),
        gpus=df["gpus"].to_numpy(np.int64),
        deadline_in=np.broadcast_to(deadline - submit, submit.shape).copy(),
    )


def split_days(source: str | os.PathLike, split: str) -> SplitDays:
    """The split's jobs by day, read once per process (and again when the file changes)."""
    path = jobs_path(source)
    mtime = path.stat().st_mtime if path.is_file() else 0.0
    return _split_days(str(path), mtime, split)


def tick_seconds(config: ClusterConfig) -> float:
    """Seconds of trace time one tick stands for: the replayed hours over the horizon."""
    lo, hi = config.jobs_hours
    return (hi - lo) * 3600.0 / config.horizon


@dataclass(frozen=True)
class ReplayedDay:
    """The jobs one episode replays, as arrays in ticks, and the load they imply."""

    date: str
    arrival: np.ndarray  # int, tick of submission
    ref: np.ndarray  # int, reference allocation: the job's GPUs, at most N
    size: np.ndarray  # float, ticks the job runs on ``ref`` nodes
    deadline: np.ndarray  # int, the trace's deadline tick (-1: none given)
    implied_load: float  # sum(ref * size) / (N * horizon) of the jobs kept
    day_load: float  # the same over all the day's jobs, before thinning


def _day_demand(days: SplitDays, config: ClusterConfig) -> tuple[np.ndarray, ...]:
    """Per job: in the window?, tick, reference nodes, size; per day: implied load."""
    tick = tick_seconds(config)
    start = config.jobs_hours[0] * 3600.0
    inside = (days.time_of_day >= start) & (days.time_of_day < config.jobs_hours[1] * 3600.0)
    arrival = np.floor((days.time_of_day - start) / tick).astype(np.int64)
    ref = np.minimum(days.gpus, config.num_nodes)
    size = np.clip(days.duration_s / tick, *config.jobs_size_range)
    demand = np.where(inside, ref * size, 0.0)
    per_day = np.add.reduceat(demand, days.offsets[:-1]) / (config.num_nodes * config.horizon)
    return inside, arrival, ref, size, per_day


def day_loads(config: ClusterConfig) -> tuple[np.ndarray, np.ndarray]:
    """Dates of the split's days and the load each implies on ``config``'s cluster."""
    days = split_days(config.jobs, config.split)
    return days.dates, _day_demand(days, config)[-1]


def replay_day(config: ClusterConfig, rng: np.random.Generator) -> ReplayedDay:
    """The jobs of one episode: a day of the split that can carry ``config.load`` (drawn by
    ``rng``), thinned to it: its jobs in a random order, each kept unless it would push
    the implied load past ``config.load``, until that is reached."""
    days = split_days(config.jobs, config.split)
    inside, arrival, ref, size, per_day = _day_demand(days, config)
    eligible = np.flatnonzero(per_day >= config.load)
    if not len(eligible):
        raise JobsError(
            f"{jobs_path(config.jobs)}: no {config.split} day carries load {config.load:g} on "
            f"{config.num_nodes} nodes (the busiest implies {per_day.max():.2f}); expected a "
            "lower load or fewer nodes"
        )
    d = int(eligible[rng.integers(len(eligible))])
    a, b = days.offsets[d], days.offsets[d + 1]
    rows = a + np.flatnonzero(inside[a:b])
    order = rows[rng.permutation(len(rows))]
    target = config.load * config.num_nodes * config.horizon
    picked, total = [], 0.0
    # In the random order, a job that would overshoot the target is passed over: the load
    # lands within a small job of it even on days with jobs as big as the whole target.
    for i, demand in zip(order.tolist(), (ref[order] * size[order]).tolist()):
        if total + demand <= target * (1 + 1e-9):
            picked.append(i)
            total += demand
            if total >= target * (1 - 1e-9):
                break
    if not picked:  # every job of the day alone exceeds the target: the smallest one
        picked = [int(order[np.argmin(ref[order] * size[order])])]
        total = float(ref[picked[0]] * size[picked[0]])
    kept = np.sort(np.asarray(picked, np.int64))
    deadline_in = days.deadline_in[kept]
    given = np.isfinite(deadline_in)
    deadline = np.full(len(kept), -1, np.int64)
    deadline[given] = arrival[kept][given] + np.maximum(
        1, np.ceil(deadline_in[given] / tick_seconds(config))
    ).astype(np.int64)
    return ReplayedDay(
        date=str(days.dates[d]),
        arrival=arrival[kept],
        ref=ref[kept],
        size=size[kept],
        deadline=deadline,
        implied_load=total / (config.num_nodes * config.horizon),
        day_load=float(per_day[d]),
    )


def replay_summary(config: ClusterConfig) -> str:
    """One line on what a replaying config draws: days, tick length, loads it can carry."""
    dates, loads = day_loads(config)
    ok = int((loads >= config.load).sum())
    if not ok:
        raise JobsError(
            f"{jobs_path(config.jobs)}: no {config.split} day carries load {config.load:g} on "
            f"{config.num_nodes} nodes (the busiest implies {loads.max():.2f}); expected a "
            "lower load or fewer nodes"
        )
    lo, hi = config.jobs_hours
    return (
        f"replaying {config.jobs} ({config.split} split): {ok} of {len(dates)} days carry load "
        f"{config.load:g} on {config.num_nodes} nodes (a day's own load: median "
        f"{np.median(loads):.2f}, max {loads.max():.2f}), thinned to it; hours {lo:g}-{hi:g} "
        f"in {config.horizon} ticks of {tick_seconds(config) / 60:g} min"
    )
