"""Workload generator: Poisson task arrivals (or a replayed day of a cluster's jobs) with
traces, targets, caps and deadlines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mara_env.config import ClusterConfig
from mara_env.replay import replay_day
from mara_env.traces import TraceSet


@dataclass(frozen=True)
class Workload:
    """All tasks of one episode, as parallel arrays sorted by arrival tick."""

    arrival: np.ndarray  # int, tick at which the task becomes active
    deadline: np.ndarray  # int, last tick boundary by which it must complete
    target: np.ndarray  # float, target loss eps_k
    trace: np.ndarray  # int, index into the TraceSet
    cap: np.ndarray  # int, parallelism cap m_k
    alpha: np.ndarray  # float, speed-up exponent: s(n) = n**alpha
    rate: np.ndarray  # float, work per tick on one node (r_k)
    size: np.ndarray  # float, ticks to reach the sampled work on n_ref nodes (T_k)
    work_sampled: np.ndarray  # float, W_k: work at which the smoothed loss hits eps_k
    work_true: np.ndarray  # float, work of the first logged point with loss <= eps_k: done
    # int, reference allocation n_ref on which ``size`` is measured; None (hand-built
    # workloads): min(cap, config.ref_nodes), as the synthetic generator draws it
    ref: np.ndarray | None = None
    # the date of the trace day a replayed workload comes from (None: synthetic arrivals);
    # episodes that replay the same day are not independent draws (the harness's intervals)
    day: str | None = None

    def __len__(self) -> int:
        return len(self.arrival)


def reference_nodes(workload: Workload, config: ClusterConfig, tasks: np.ndarray) -> np.ndarray:
    """The reference allocation ``n_ref`` of ``tasks``: what their size is measured on."""
    if workload.ref is not None:
        return workload.ref[tasks]
    return np.minimum(workload.cap[tasks], config.ref_nodes)


def mean_demand(config: ClusterConfig) -> float:
    """Expected node-ticks one task demands at its reference allocation."""
    lo, hi = config.size_range
    mean_size = (hi - lo) / np.log(hi / lo) if hi > lo else lo
    n_ref = np.minimum(np.asarray(config.cap_choices), config.ref_nodes)
    return float(np.mean(n_ref) * mean_size)


def arrival_rate(config: ClusterConfig) -> float:
    """Poisson arrival rate per tick that makes the load factor equal ``config.load``."""
    return config.load * config.num_nodes / mean_demand(config)


def sample_workload(config: ClusterConfig, traces: TraceSet, rng: np.random.Generator) -> Workload:
    """Draw one episode's tasks (synthetic, or a replayed day when ``config.jobs`` is set);
    all randomness comes from ``rng``."""
    if config.jobs is not None:
        return replayed_workload(config, traces, rng)
    counts = rng.poisson(arrival_rate(config), size=config.horizon)
    arrival = np.repeat(np.arange(config.horizon), counts)
    n = len(arrival)
    trace, work_sampled, target = _draw_targets(config, traces, rng, n)
    cap = rng.choice(np.asarray(config.cap_choices), size=n)
    alpha = rng.uniform(*config.alpha_range, size=n)
    size = _draw_sizes(config, rng, n)
    n_ref = np.minimum(cap, config.ref_nodes)
    rate = work_sampled / (size * n_ref**alpha)
    deadline = arrival + _allowed_ticks(config, size, rng, lambda m: _draw_sizes(config, rng, m))
    return Workload(
        arrival=arrival,
        deadline=deadline,
        target=target,
        trace=trace,
        cap=cap.astype(np.int64),
        alpha=alpha,
        rate=rate,
        size=size,
        work_sampled=work_sampled,
        work_true=_work_true(traces, trace, target),
        ref=n_ref.astype(np.int64),
    )


def replayed_workload(
    config: ClusterConfig, traces: TraceSet, rng: np.random.Generator
) -> Workload:
    """One replayed day of ``config.jobs`` as tasks (``docs/jobs.md``): arrivals, reference
    allocations, sizes and given deadlines from the jobs; curves, targets, speed-ups and
    the other deadlines drawn as for synthetic tasks."""
    day = replay_day(config, rng)
    n = len(day.arrival)
    trace, work_sampled, target = _draw_targets(config, traces, rng, n)
    ref = day.ref
    cap = np.clip(np.ceil(config.jobs_cap_multiple * ref), ref, config.num_nodes)
    alpha = rng.uniform(*config.alpha_range, size=n)
    rate = work_sampled / (day.size * ref**alpha)
    drawn = day.arrival + _allowed_ticks(
        config, day.size, rng, lambda m: rng.choice(day.size, size=m)
    )
    return Workload(
        arrival=day.arrival,
        deadline=np.where(day.deadline >= 0, day.deadline, drawn),
        target=target,
        trace=trace,
        cap=cap.astype(np.int64),
        alpha=alpha,
        rate=rate,
        size=day.size,
        work_sampled=work_sampled,
        work_true=_work_true(traces, trace, target),
        ref=ref.astype(np.int64),
        day=day.date,
    )


def _draw_sizes(config: ClusterConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` synthetic task sizes ``T_k``, log-uniform in ``size_range``."""
    lo, hi = config.size_range
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def user_estimate(
    config: ClusterConfig,
    size: np.ndarray,
    rng: np.random.Generator,
    other_sizes: Callable[[int], np.ndarray],
) -> np.ndarray:
    """Each task's size as its user estimates it, by ``config.deadline_model``
    (:class:`~mara_env.config.ClusterConfig`); ``other_sizes(m)`` draws ``m`` sizes of
    other tasks from the workload's distribution (the ``blind`` model's estimates)."""
    n = len(size)
    if config.deadline_model == "blind":
        size = other_sizes(n)
    if config.deadline_model in ("unbiased", "blind"):
        return size * np.exp(config.deadline_sigma * rng.standard_normal(n))
    menu = np.asarray(config.estimate_menu)
    raw = size * config.estimate_padding * np.exp(config.estimate_spread * rng.standard_normal(n))
    snapped = menu[np.minimum(np.searchsorted(menu, raw, side="left"), len(menu) - 1)]
    return np.where(rng.random(n) < config.estimate_top_share, menu[-1], snapped)


def _allowed_ticks(
    config: ClusterConfig,
    size: np.ndarray,
    rng: np.random.Generator,
    other_sizes: Callable[[int], np.ndarray],
) -> np.ndarray:
    """Ticks from arrival to deadline, ``ceil(slack * estimate)`` (drawn last, so that every
    other draw of an episode is the same whatever the deadline model)."""
    slack = rng.uniform(*config.deadline_slack, size=len(size))
    return np.ceil(slack * user_estimate(config, size, rng, other_sizes)).astype(np.int64)


def _draw_targets(
    config: ClusterConfig, traces: TraceSet, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each task's trace, required work ``W_k`` and target ``eps_k`` (a point drawn
    uniformly in ``target_range`` of the trace's logged points)."""
    trace = rng.integers(0, len(traces), size=n)
    lengths = np.diff(traces.offsets)[trace]
    lo, hi = config.target_range
    j = np.floor(rng.uniform(lo, hi, size=n) * (lengths - 1)).astype(np.int64)
    idx = traces.offsets[trace] + j
    return trace, traces.steps[idx], traces.smooth[idx]


def _work_true(traces: TraceSet, trace: np.ndarray, target: np.ndarray) -> np.ndarray:
    return np.array(
        [_first_reach(traces, t, eps) for t, eps in zip(trace, target)], dtype=np.float64
    )


def _first_reach(traces: TraceSet, i: int, eps: float) -> float:
    """Work of the first logged point with loss <= eps (0: any progress; inf: never).

    A job evaluates at its logged points and stops at the first one at or below its
    target, so the task completes once its work reaches this value.
    """
    steps, loss = traces.trace(i)
    hit = np.flatnonzero(loss <= eps)
    if not len(hit):
        return float("inf")
    return float(steps[hit[0]]) if hit[0] > 0 else 0.0
