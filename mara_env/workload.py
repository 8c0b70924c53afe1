"""Workload generator: Poisson task arrivals with traces, targets, caps and deadlines."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mara_env.config import ClusterConfig
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
    work_true: np.ndarray  # float, first work at which the reported loss is <= eps_k

    def __len__(self) -> int:
        return len(self.arrival)


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
    """Draw one episode's tasks; all randomness comes from ``rng``."""
    counts = rng.poisson(arrival_rate(config), size=config.horizon)
    arrival = np.repeat(np.arange(config.horizon), counts)
    n = len(arrival)
    trace = rng.integers(0, len(traces), size=n)
    lengths = np.diff(traces.offsets)[trace]
    lo, hi = config.target_range
    j = np.floor(rng.uniform(lo, hi, size=n) * (lengths - 1)).astype(np.int64)
    idx = traces.offsets[trace] + j
    work_sampled = traces.steps[idx]
    target = traces.smooth[idx]
    cap = rng.choice(np.asarray(config.cap_choices), size=n)
    alpha = rng.uniform(*config.alpha_range, size=n)
    size = np.exp(rng.uniform(np.log(config.size_range[0]), np.log(config.size_range[1]), n))
    n_ref = np.minimum(cap, config.ref_nodes)
    rate = work_sampled / (size * n_ref**alpha)
    slack = rng.uniform(*config.slack_range, size=n)
    # The user's estimate of the size is off by a log-normal factor (drawn last, so every
    # other draw is the same whatever sigma is).
    estimate = size * np.exp(config.deadline_sigma * rng.standard_normal(n))
    deadline = arrival + np.ceil(slack * estimate).astype(np.int64)
    work_true = np.array(
        [_first_reach(traces, t, eps) for t, eps in zip(trace, target)], dtype=np.float64
    )
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
        work_true=work_true,
    )


def _first_reach(traces: TraceSet, i: int, eps: float) -> float:
    """Work at which the reported loss first is <= eps (0: any progress; inf: never).

    The loss reported at work ``w`` is the raw loss of the last logged point with
    ``step <= w`` (the first point's loss before that), so this is exact.
    """
    steps, loss = traces.trace(i)
    hit = np.flatnonzero(loss <= eps)
    if not len(hit):
        return float("inf")
    return float(steps[hit[0]]) if hit[0] > 0 else 0.0
