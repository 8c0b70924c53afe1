"""A cluster's own history: the deadline prior fitted on the tasks its users ran.

What a deadline says about a task's size is learnt from a history of finished tasks
(:mod:`flow_predictor.deadline_prior`), and the history a scheduler may know is its own
cluster's: the train split's tasks drawn under the cluster's settings (how its users set
deadlines, what its tasks look like), never the rule that made the deadlines.  A cluster's
*history settings* are every :class:`~mara_env.config.ClusterConfig` field that differs
from its default, except the ones that pick an episode or size the cluster
(:data:`EPISODE_KEYS`): a 64-node cluster's users set deadlines as a 16-node cluster's do.

:func:`fit_prior` draws such a history and fits the prior (what ``mara predictor
deadline-prior`` writes); :func:`cluster_prior` gives the prior of a cluster's history,
read from a shipped file where one was fitted on exactly that history (the shipped files
are fits of the default settings), else fitted once per process (2-3 s).  ``hedge`` plans
on it by default, and a learned policy acts with it on a cluster whose history settings
are not those it was trained under.  Numpy only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from flow_predictor.deadline_prior import (
    HISTORY_PRIORS,
    SHIPPED_PRIOR,
    DeadlinePrior,
    deadline_scale,
    fit_history,
)
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces
from mara_env.workload import sample_workload

# Fields that pick an episode or size the cluster, not its users or tasks: a history is
# drawn with every other setting of the cluster.
EPISODE_KEYS = frozenset(
    {
        "split",
        "load",
        "jobs",
        "jobs_hours",
        "horizon",
        "num_nodes",
        "num_slots",
        "shaping",
        "max_cycles",
        "strict",
    }
)
# How a history is drawn: the train split, both shipped workloads (``none``: synthetic),
# 40 episodes per workload and load, base seed 0 (the shipped files' ``fitted_on``).
HISTORY_SPLIT = "train"
HISTORY_JOBS = ("none", "philly")
HISTORY_LOADS = (1.0, 1.5, 2.0)
HISTORY_EPISODES = 40


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists), for comparing records."""
    return json.loads(json.dumps(value))


def history_settings(config: ClusterConfig) -> dict[str, Any]:
    """The settings a history of ``config``'s cluster is drawn under: its fields that differ
    from their defaults, less :data:`EPISODE_KEYS` (plain JSON values, sorted by name)."""
    out = {}
    for f in dataclasses.fields(ClusterConfig):
        value = getattr(config, f.name)
        if f.name not in EPISODE_KEYS and value != f.default:
            out[f.name] = value
    return _plain(dict(sorted(out.items())))


def fit_prior(
    settings: dict[str, Any],
    jobs: Sequence[str] = HISTORY_JOBS,
    split: str = HISTORY_SPLIT,
    loads: Sequence[float] = HISTORY_LOADS,
    episodes: int = HISTORY_EPISODES,
    seed: int = 0,
) -> DeadlinePrior:
    """The deadline prior fitted on the tasks of ``episodes`` episodes per workload of
    ``jobs`` (``none``: synthetic) and load of ``loads``, drawn from ``split`` under the
    cluster ``settings`` (``ClusterConfig`` keys but split, load and jobs): their work and
    the work their deadlines imply (:func:`~flow_predictor.deadline_prior.fit_history`).
    Raises ``ConfigError``/``TraceError``/``ValueError`` naming what is wrong."""
    configs = [
        ClusterConfig(**settings, split=split, load=load, jobs=None if job == "none" else job)
        for job in jobs
        for load in loads
    ]
    traces = load_traces(settings.get("traces"), split=split)
    work, scale, window = [], [], []
    for c, config in enumerate(configs):
        for i in range(episodes):
            wl = sample_workload(config, traces, np.random.default_rng([seed, c, i]))
            tasks = np.arange(len(wl.arrival))
            work.append(wl.work_true)
            scale.append(deadline_scale(wl, config, tasks))
            window.append(wl.deadline - wl.arrival)
    work_all = np.concatenate(work)
    log_windows, log_ratios = fit_history(
        work_all, np.concatenate(scale), np.concatenate(window), seed
    )
    fitted_on = {
        **_record(settings, jobs, split, loads, episodes, seed),
        "tasks": int(np.isfinite(work_all).sum()),
    }
    # the values a prior file stores (6 decimals), so that a fit and its file plan alike
    return DeadlinePrior(np.round(log_ratios, 6), fitted_on, np.round(log_windows, 6))


def _record(
    settings: dict[str, Any],
    jobs: Sequence[str],
    split: str,
    loads: Sequence[float],
    episodes: int,
    seed: int,
) -> dict[str, Any]:
    """The ``fitted_on`` of a prior fitted on that history (:func:`fit_prior`'s
    arguments), less its task count."""
    return {
        "split": split,
        "jobs": list(jobs),
        "loads": [float(v) for v in loads],
        "episodes": int(episodes),
        "seed": int(seed),
        "cluster": _plain(settings),
    }


@functools.lru_cache(maxsize=16)
def _prior(jobs: tuple[str, ...], settings_json: str) -> DeadlinePrior:
    settings = json.loads(settings_json)
    want = _record(settings, jobs, HISTORY_SPLIT, HISTORY_LOADS, HISTORY_EPISODES, 0)
    for path in (SHIPPED_PRIOR, *HISTORY_PRIORS.values()):
        shipped = DeadlinePrior.load(path)
        if {k: v for k, v in shipped.fitted_on.items() if k != "tasks"} == want:
            return shipped
    return fit_prior(settings, jobs)


def cluster_prior(config: ClusterConfig, own_workload: bool = False) -> DeadlinePrior:
    """The deadline prior of ``config``'s cluster's history (:func:`history_settings`), on
    both shipped workloads' train tasks, or with ``own_workload`` on those of the workload
    its episodes run: a shipped file where one holds that fit, else :func:`fit_prior` (once
    per process and history)."""
    settings = json.dumps(history_settings(config), sort_keys=True)
    jobs = (config.jobs or "none",) if own_workload else HISTORY_JOBS
    return _prior(jobs, settings)
