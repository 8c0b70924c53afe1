"""Tuning a cluster's price of a miss and its planner's distribution by playing ``hedge``
on its history.

:func:`tune_miss_cost` plays ``hedge`` with each price of
:data:`~mara_agents.planning.history.MISS_COSTS` on the train episodes of the cluster's
history, paired, and keeps the cheaper price only where its lead over today's rule (1) has
its 95 % interval above zero (about 3 minutes on one core: 360 episodes).
:func:`choose_distribution` then plays it at that price with each remaining-work
distribution of :data:`~mara_agents.planning.history.DISTRIBUTIONS` on each workload's own
episodes, and keeps the calibrated model on a workload unless the fused one's lead there
has its 95 % interval above zero (about 4 more minutes: 240 episodes).
:func:`tune_history` is both, the record ``mara history fit`` writes;
:func:`resolve_history` builds a run's
:class:`~mara_agents.planning.history.ClusterHistory` in the parent and, where the run
needs a tuning the history lacks, tunes it there, once, with a progress bar.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mara_agents.baselines.hedge import Hedge
from mara_agents.evaluation.runner import episode_seed, history_readers, progress_bar
from mara_agents.evaluation.stats import mean_ci
from mara_agents.planning.history import (
    DISTRIBUTIONS,
    HISTORY_JOBS,
    HISTORY_LOADS,
    HISTORY_SPLIT,
    MISS_COSTS,
    TUNE_EPISODES,
    ClusterHistory,
    tuning_record,
)
from mara_env.config import ClusterConfig
from mara_env.threads import single_threaded
from mara_env.traces import load_traces

# the distribution the tuning hedge plans on: the flow model fused with the deadline
# prior, hedge's default when the shipped prices were tuned (history_choices.json), so a
# tuning reproduces theirs; on the calibrated model, hedge's default since, the padded
# cluster's price and no charge at all were level on val (docs/results.md, "Planning on
# the calibrated distribution")
TUNED_WITH = "flow+deadline"


def tune_miss_cost(
    settings: dict[str, Any],
    episodes: int = TUNE_EPISODES,
    seed: int = 0,
    candidates: Sequence[float] = MISS_COSTS,
    progress: bool = False,
) -> dict[str, Any]:
    """``hedge``'s price of a miss chosen on the history of a cluster of ``settings``: for each
    workload of :data:`HISTORY_JOBS` and load of :data:`HISTORY_LOADS`, ``episodes``
    train episodes (base seed ``seed``) played by ``hedge:miss_cost=m`` for each ``m``
    of ``candidates`` (on :data:`TUNED_WITH`, the cluster's deadline prior fused with
    the flow model; every other knob at its default), paired. The first candidate is
    kept unless another one's completion rate minus its, over all those episodes, has
    its 95 % t-interval above zero (then the one with the largest lead). Returns the
    record a history file holds: ``fitted_on``
    (:func:`~mara_agents.planning.history.tuning_record`), ``leads`` (per candidate
    after the first: the mean lead and its half-width, overall and per workload and
    load) and ``miss_cost``."""
    planners = [Hedge(predictor=TUNED_WITH, miss_cost=float(m)) for m in candidates]
    rates = _paired_rates(settings, planners, episodes, seed, progress, "miss_cost")
    kept, leads = _leads(rates, [f"{float(m):g}" for m in candidates])
    chosen = float(candidates[kept])
    return {
        "fitted_on": tuning_record(settings, episodes, seed, candidates),
        "leads": leads,
        "miss_cost": chosen,
    }


def _paired_rates(
    settings: dict[str, Any],
    planners: Sequence[Hedge],
    episodes: int,
    seed: int,
    progress: bool,
    desc: str,
) -> dict[tuple[str, float], np.ndarray]:
    """Completion rates of ``planners`` (rows) on the same ``episodes`` train episodes
    (columns) per workload of :data:`HISTORY_JOBS` and load of :data:`HISTORY_LOADS` of a
    cluster of ``settings``, each planner handed that workload's history (a progress bar
    named ``desc`` with ``progress``), on one thread as the harness's episodes."""
    from mara_env import schedulers

    traces = load_traces(settings.get("traces"), split=HISTORY_SPLIT)
    total = len(HISTORY_JOBS) * len(HISTORY_LOADS) * len(planners) * episodes
    bar = progress_bar(total, progress, desc)
    rates: dict[tuple[str, float], np.ndarray] = {}
    try:
        with single_threaded():
            for job in HISTORY_JOBS:
                for load in HISTORY_LOADS:
                    config = ClusterConfig(
                        **settings,
                        split=HISTORY_SPLIT,
                        load=load,
                        jobs=None if job == "none" else job,
                    )
                    history = ClusterHistory.of(config)
                    seeds = [episode_seed(seed, load, i) for i in range(episodes)]
                    played = []
                    for h in planners:
                        h.use_history(history)
                        played.append([])
                        for s in seeds:
                            m = schedulers.run_episode(h, config, traces, s)
                            played[-1].append(m["completion_rate"])
                            bar.update(1)
                    rates[job, load] = np.array(played)
    finally:
        bar.close()
    return rates


def _leads(
    rates: dict[tuple[str, float], np.ndarray], names: Sequence[str]
) -> tuple[int, dict[str, Any]]:
    """The row of ``rates`` kept (0 unless another's completion rate minus row 0's, over
    all episodes, has its 95 % t-interval above zero: then the one with the largest lead)
    and each other row's lead over row 0 (mean and half-width, overall and per workload
    and load), by its name of ``names``."""
    every = np.concatenate(list(rates.values()), axis=1)
    leads: dict[str, Any] = {}
    chosen, best = 0, 0.0
    for c in range(1, len(names)):
        mean, half = mean_ci(every[c] - every[0])
        parts = {
            f"{job}@{load:g}": [round(v, 4) for v in mean_ci(r[c] - r[0])]
            for (job, load), r in rates.items()
        }
        leads[names[c]] = {"all": [round(mean, 4), round(half, 4)], **parts}
        if mean - half > 0 and mean > best:
            chosen, best = c, mean
    return chosen, leads


def choose_distribution(
    settings: dict[str, Any],
    miss_cost: float,
    episodes: int = TUNE_EPISODES,
    seed: int = 0,
    candidates: Sequence[str] = DISTRIBUTIONS,
    progress: bool = False,
) -> dict[str, Any]:
    """The remaining-work distribution ``hedge`` plans on, chosen per workload of
    :data:`HISTORY_JOBS` on the history of a cluster of ``settings``: ``episodes`` train
    episodes of that workload per load of :data:`HISTORY_LOADS` (base seed ``seed``),
    played by ``hedge:predictor=c:miss_cost=miss_cost`` for each ``c`` of ``candidates``,
    paired; the first is kept unless another's lead has its 95 % t-interval above zero.
    Returns ``distribution`` (by workload) and ``distribution_leads`` (by workload, as
    :func:`tune_miss_cost`'s ``leads``)."""
    planners = [Hedge(predictor=c, miss_cost=float(miss_cost)) for c in candidates]
    rates = _paired_rates(settings, planners, episodes, seed, progress, "distribution")
    chosen, leads = {}, {}
    for job in HISTORY_JOBS:
        kept, leads[job] = _leads({k: r for k, r in rates.items() if k[0] == job}, list(candidates))
        chosen[job] = candidates[kept]
    return {"distribution": chosen, "distribution_leads": leads}


def tune_history(
    settings: dict[str, Any],
    episodes: int = TUNE_EPISODES,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """The tuning ``mara history fit`` writes for a cluster of ``settings``: the price of a
    miss (:func:`tune_miss_cost`), then each workload's distribution at that price
    (:func:`choose_distribution`), in one record."""
    record = tune_miss_cost(settings, episodes, seed, progress=progress)
    record.update(
        choose_distribution(settings, record["miss_cost"], episodes, seed, progress=progress)
    )
    return record


def resolve_history(
    config: ClusterConfig,
    specs: Sequence[str],
    files: Sequence[str | Path] = (),
    progress: bool = True,
) -> ClusterHistory | None:
    """``config``'s :class:`~mara_agents.planning.history.ClusterHistory`, built here (the
    parent) for a run of ``specs`` to hand to its workers (None where none of them reads
    one); where one plans with a price of a miss that no tuning (shipped, or of ``files``)
    holds, the price (and the distribution) are tuned here, once (:func:`tune_history`,
    with a progress bar),
    saying which command keeps the tuning for later runs."""
    readers = history_readers(specs)
    if not readers:
        return None
    history = ClusterHistory.of(config, files)
    if history.tuned or not any(r.needs_tuning for r in readers.values()):
        return history
    print(
        f"tuning hedge's price of a miss and its distribution on this cluster's history "
        f"{history.key} (about 7 minutes a core); `mara history fit --cluster FILE --out "
        "HISTORY.json` keeps it for the next run (--history HISTORY.json)",
        file=sys.stderr,
        flush=True,
    )
    return history.tuned_from(tune_history(json.loads(history.key), progress=progress))
