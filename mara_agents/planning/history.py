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
are not those it was trained under.

The same history prices a miss (``hedge``'s ``miss_cost``, the node-ticks a sample that
misses its deadline is charged, as a share of the time left): :func:`tune_miss_cost` plays
``hedge`` with each of :data:`MISS_COSTS` on the history's episodes, paired, and keeps the
cheaper price only where its lead over today's rule (1) has its 95 % interval above zero;
:func:`cluster_miss_cost` reads it from :data:`SHIPPED_CHOICES` where that file holds the
cluster's history, else tunes it once per process (about 3 minutes on one core: 360
episodes of ``hedge``).  How users set deadlines decides which price pays (a cluster whose
deadlines carry the size well loses by pricing misses low), and a scheduler is not told
that: its history is.  Numpy, except the tuning (it plays ``hedge``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
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
from mara_env.traces import TraceError, load_traces
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
# The prices of a miss tuned on a history (today's rule first: the one kept unless another
# leads it), its episodes per workload and load, and the shipped tunings.
MISS_COSTS = (1.0, 0.1, 0.0)
TUNE_EPISODES = 20
SHIPPED_CHOICES = Path(__file__).with_name("history_choices.json")

log = logging.getLogger(__name__)


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


def _check_history_split(settings: dict[str, Any]) -> None:
    """Raise :class:`TraceError` in one line, before any fit or tuning, when the trace
    library of a cluster of ``settings`` has no :data:`HISTORY_SPLIT` traces to draw its
    history from."""
    try:
        load_traces(settings.get("traces"), split=HISTORY_SPLIT)
    except TraceError as exc:
        raise TraceError(
            f"{exc}: this cluster's history (the deadline prior and hedge's price of a miss "
            f"that hedge and the policy read) is drawn from the {HISTORY_SPLIT} split of its "
            f"trace library, whatever --split the run takes; expected a library with "
            f"{HISTORY_SPLIT} traces, or hedge's prior and price given (hedge:prior=FILE:"
            "miss_cost=NUMBER, the prior from `mara predictor deadline-prior`)"
        ) from None


@functools.lru_cache(maxsize=16)
def _prior(jobs: tuple[str, ...], settings_json: str) -> DeadlinePrior:
    settings = json.loads(settings_json)
    want = _record(settings, jobs, HISTORY_SPLIT, HISTORY_LOADS, HISTORY_EPISODES, 0)
    for path in (SHIPPED_PRIOR, *HISTORY_PRIORS.values()):
        shipped = DeadlinePrior.load(path)
        if {k: v for k, v in shipped.fitted_on.items() if k != "tasks"} == want:
            return shipped
    _check_history_split(settings)
    return fit_prior(settings, jobs)


def cluster_prior(config: ClusterConfig, own_workload: bool = False) -> DeadlinePrior:
    """The deadline prior of ``config``'s cluster's history (:func:`history_settings`), on
    both shipped workloads' train tasks, or with ``own_workload`` on those of the workload
    its episodes run: a shipped file where one holds that fit, else :func:`fit_prior` (once
    per process and history)."""
    settings = json.dumps(history_settings(config), sort_keys=True)
    jobs = (config.jobs or "none",) if own_workload else HISTORY_JOBS
    return _prior(jobs, settings)


def _tune_record(
    settings: dict[str, Any], episodes: int, seed: int, candidates: Sequence[float]
) -> dict[str, Any]:
    """What a tuning of ``miss_cost`` was done on (:func:`tune_miss_cost`'s arguments)."""
    return {
        **_record(settings, HISTORY_JOBS, HISTORY_SPLIT, HISTORY_LOADS, episodes, seed),
        "candidates": [float(v) for v in candidates],
    }


def tune_miss_cost(
    settings: dict[str, Any],
    episodes: int = TUNE_EPISODES,
    seed: int = 0,
    candidates: Sequence[float] = MISS_COSTS,
) -> dict[str, Any]:
    """``hedge``'s price of a miss chosen on the history of a cluster of ``settings``: for
    each workload of :data:`HISTORY_JOBS` and load of :data:`HISTORY_LOADS`, ``episodes``
    train episodes (base seed ``seed``) played by ``hedge:miss_cost=m`` for each ``m`` of
    ``candidates`` (the cluster's deadline prior and the flow model, every other knob at
    its default), paired.  The first candidate is kept unless another one's completion
    rate minus its, over all those episodes, has its 95 % t-interval above zero (then the
    one with the largest lead).  Returns the record :data:`SHIPPED_CHOICES` holds:
    ``fitted_on``, ``leads`` (per candidate after the first: the mean lead and its
    half-width, overall and per workload and load) and ``miss_cost``."""
    from mara_agents.baselines.hedge import Hedge
    from mara_agents.evaluation.runner import episode_seed
    from mara_agents.evaluation.stats import mean_ci
    from mara_env.schedulers import run_episode

    traces = load_traces(settings.get("traces"), split=HISTORY_SPLIT)
    planners = [Hedge(miss_cost=float(m)) for m in candidates]
    rates: dict[tuple[str, float], np.ndarray] = {}
    for job in HISTORY_JOBS:
        for load in HISTORY_LOADS:
            config = ClusterConfig(
                **settings, split=HISTORY_SPLIT, load=load, jobs=None if job == "none" else job
            )
            seeds = [episode_seed(seed, load, i) for i in range(episodes)]
            rates[job, load] = np.array(
                [
                    [run_episode(h, config, traces, s)["completion_rate"] for s in seeds]
                    for h in planners
                ]
            )
    every = np.concatenate(list(rates.values()), axis=1)
    leads: dict[str, Any] = {}
    chosen, best = float(candidates[0]), 0.0
    for c in range(1, len(candidates)):
        mean, half = mean_ci(every[c] - every[0])
        parts = {
            f"{job}@{load:g}": [round(v, 4) for v in mean_ci(r[c] - r[0])]
            for (job, load), r in rates.items()
        }
        leads[f"{float(candidates[c]):g}"] = {"all": [round(mean, 4), round(half, 4)], **parts}
        if mean - half > 0 and mean > best:
            chosen, best = float(candidates[c]), mean
    return {
        "fitted_on": _tune_record(settings, episodes, seed, candidates),
        "leads": leads,
        "miss_cost": chosen,
    }


def shipped_choices(path: Path = SHIPPED_CHOICES) -> list[dict[str, Any]]:
    """The tunings shipped in ``path`` (a JSON list of :func:`tune_miss_cost` records)."""
    return json.loads(path.read_text())


def write_choices(records: Sequence[dict[str, Any]], path: Path = SHIPPED_CHOICES) -> None:
    """Write :func:`tune_miss_cost` ``records`` to ``path``, each replacing every record
    there of the same history settings (whatever its candidates, episodes or seed: a
    superseded tuning, which the reader no longer matches, is not left behind)."""
    new = [r["fitted_on"]["cluster"] for r in records]
    old = shipped_choices(path) if path.exists() else []
    kept = [r for r in old if r["fitted_on"]["cluster"] not in new]
    path.write_text(json.dumps(kept + list(records), indent=1) + "\n")


@functools.lru_cache(maxsize=16)
def _miss_cost(settings_json: str) -> float:
    settings = json.loads(settings_json)
    want = _tune_record(settings, TUNE_EPISODES, 0, MISS_COSTS)
    for record in shipped_choices():
        if record["fitted_on"] == want:
            return float(record["miss_cost"])
    _check_history_split(settings)
    log.warning(
        "hedge: tuning miss_cost on this cluster's history (%s), once per process: about 3 minutes",
        settings or "default settings",
    )
    return tune_miss_cost(settings)["miss_cost"]


def cluster_miss_cost(config: ClusterConfig) -> float:
    """``hedge``'s price of a miss on ``config``'s cluster, tuned on its history
    (:func:`history_settings`): the shipped tuning where one was done on that history,
    else :func:`tune_miss_cost` (once per process and history)."""
    return _miss_cost(json.dumps(history_settings(config), sort_keys=True))
