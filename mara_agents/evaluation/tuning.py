"""Tuning a cluster's price of a miss by playing ``hedge`` on its history.

:func:`tune_miss_cost` plays ``hedge`` with each price of
:data:`~mara_agents.planning.history.MISS_COSTS` on the train episodes of the cluster's
history, paired, and keeps the cheaper price only where its lead over today's rule (1) has
its 95 % interval above zero (about 3 minutes on one core: 360 episodes).  ``mara history
fit`` writes its record; :func:`resolve_history` builds a run's
:class:`~mara_agents.planning.history.ClusterHistory` in the parent and, where the run
needs a price the history lacks, tunes it there, once, with a progress bar.
"""

from __future__ import annotations

import dataclasses
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
    HISTORY_JOBS,
    HISTORY_LOADS,
    HISTORY_SPLIT,
    MISS_COSTS,
    TUNE_EPISODES,
    ClusterHistory,
    tuning_record,
)
from mara_env.config import ClusterConfig
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
    from mara_env import schedulers

    traces = load_traces(settings.get("traces"), split=HISTORY_SPLIT)
    planners = [Hedge(predictor=TUNED_WITH, miss_cost=float(m)) for m in candidates]
    rates: dict[tuple[str, float], np.ndarray] = {}
    total = len(HISTORY_JOBS) * len(HISTORY_LOADS) * len(planners) * episodes
    bar = progress_bar(total, progress, "miss_cost")
    try:
        for job in HISTORY_JOBS:
            for load in HISTORY_LOADS:
                config = ClusterConfig(
                    **settings, split=HISTORY_SPLIT, load=load, jobs=None if job == "none" else job
                )
                history = ClusterHistory.of(config)
                seeds = [episode_seed(seed, load, i) for i in range(episodes)]
                played = []
                for h in planners:
                    h.use_history(history)
                    played.append([])
                    for s in seeds:
                        played[-1].append(
                            schedulers.run_episode(h, config, traces, s)["completion_rate"]
                        )
                        bar.update(1)
                rates[job, load] = np.array(played)
    finally:
        bar.close()
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
        "fitted_on": tuning_record(settings, episodes, seed, candidates),
        "leads": leads,
        "miss_cost": chosen,
    }


def resolve_history(
    config: ClusterConfig,
    specs: Sequence[str],
    files: Sequence[str | Path] = (),
    progress: bool = True,
) -> ClusterHistory | None:
    """``config``'s :class:`~mara_agents.planning.history.ClusterHistory`, built here (the
    parent) for a run of ``specs`` to hand to its workers (None where none of them reads
    one); where one plans with a price of a miss that no tuning (shipped, or of ``files``)
    holds, the price is tuned here, once (:func:`tune_miss_cost`, with a progress bar),
    saying which command keeps the tuning for later runs."""
    readers = history_readers(specs)
    if not readers:
        return None
    history = ClusterHistory.of(config, files)
    if history.miss_cost is not None or not any(r.needs_price for r in readers.values()):
        return history
    print(
        f"tuning hedge's price of a miss on this cluster's history {history.key} "
        "(about 3 minutes a core); `mara history fit --cluster FILE --out HISTORY.json` "
        "keeps it for the next run (--history HISTORY.json)",
        file=sys.stderr,
        flush=True,
    )
    record = tune_miss_cost(json.loads(history.key), progress=progress)
    return dataclasses.replace(history, miss_cost=record["miss_cost"])
