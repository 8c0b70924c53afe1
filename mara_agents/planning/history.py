"""A cluster's own history: the deadline prior fitted on the tasks its users ran, and the
price of a miss tuned on them (:class:`ClusterHistory`).

What a deadline says about a task's size is learnt from a history of finished tasks
(:mod:`flow_predictor.deadline_prior`), and the history a scheduler may know is its own
cluster's: the train split's tasks drawn under the cluster's settings (how its users set
deadlines, what its tasks look like), never the rule that made the deadlines.  A cluster's
*history settings* are every :class:`~mara_env.config.ClusterConfig` field that differs
from its default, except the ones that pick an episode or size the cluster
(:data:`EPISODE_KEYS`): a 64-node cluster's users set deadlines as a 16-node cluster's do.

:func:`fit_prior` draws such a history and fits the prior (what ``mara predictor
deadline-prior`` writes).  The same history prices a miss (``hedge``'s ``miss_cost``, the
node-ticks a sample that misses its deadline is charged, as a share of the time left):
``mara history fit`` plays ``hedge`` with each of :data:`MISS_COSTS` on the history's
episodes (:mod:`mara_agents.evaluation.tuning`), then, at the price kept, with each
remaining-work distribution of :data:`DISTRIBUTIONS` on each workload's own episodes, and
writes the record :func:`tuning_record` describes; :data:`SHIPPED_CHOICES` holds the
shipped tunings.  How users set deadlines decides which price pays (a cluster whose
deadlines carry the size well loses by pricing misses low), and what a workload's jobs
look like decides which distribution pays (the calibrated model was fitted mostly on
synthetic tasks; on Philly's days the fused one planned better while hedge had no
urgency); a scheduler is not told either: its history is.

:class:`ClusterHistory` is what a cluster's history says, built once by whoever starts a
run (``ClusterHistory.of(config)``: the shipped prior file where one was fitted on exactly
that history, else a fit, 2-3 s; the shipped or the user's tuning) and handed to the
schedulers and the policy that read it.  Nothing here plays an episode.  Numpy only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
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
from mara_env import json_file
from mara_env.atomic import atomic_write
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
# The remaining-work distributions a planner's ``predictor=cluster`` chooses between, per
# workload, on the history (the calibrated model first: kept unless the fused one leads
# it on that workload's own episodes; a workload the history does not hold keeps it).
DISTRIBUTIONS = ("task", "flow+deadline")
SHIPPED_CHOICES = Path(__file__).with_name("history_choices.json")
# The sources a planner's ``prior`` and ``miss_cost`` may name: the cluster's history (both
# shipped workloads; the default), or that of the workload its episodes run alone.
CLUSTER = "cluster"
WORKLOAD = "workload"
# The one word that meant all three before; a spec that writes it is told the new ones.
RENAMED = {"history": f"{CLUSTER!r} (the cluster's history) or {WORKLOAD!r} (prior= only)"}


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists), for comparing records."""
    return json.loads(json.dumps(value))


def check_source(what: str, value: Any) -> None:
    """ValueError naming the new words where ``value`` is the old spelling ``history``."""
    if isinstance(value, str) and value in RENAMED:
        raise ValueError(f"{what}={value!r} is renamed: write {RENAMED[value]}")


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


def history_key(config: ClusterConfig) -> str:
    """:func:`history_settings` as sorted JSON: which history ``config``'s cluster has."""
    return json.dumps(history_settings(config), sort_keys=True)


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
def _prior(jobs: tuple[str, ...], key: str) -> DeadlinePrior:
    settings = json.loads(key)
    want = _record(settings, jobs, HISTORY_SPLIT, HISTORY_LOADS, HISTORY_EPISODES, 0)
    for path in (SHIPPED_PRIOR, *HISTORY_PRIORS.values()):
        shipped = DeadlinePrior.load(path)
        if {k: v for k, v in shipped.fitted_on.items() if k != "tasks"} == want:
            return shipped
    _check_history_split(settings)
    return fit_prior(settings, jobs)


def tuning_record(
    settings: dict[str, Any],
    episodes: int = TUNE_EPISODES,
    seed: int = 0,
    candidates: Sequence[float] = MISS_COSTS,
) -> dict[str, Any]:
    """The ``fitted_on`` of a tuning of ``miss_cost`` on the history of a cluster of
    ``settings``: ``episodes`` train episodes per workload of :data:`HISTORY_JOBS` and load
    of :data:`HISTORY_LOADS` (base seed ``seed``) for each price of ``candidates``, then
    for each of :data:`DISTRIBUTIONS` (``distributions``; a record written before that
    choice lacks the key, and holds no choice)."""
    return {
        **_record(settings, HISTORY_JOBS, HISTORY_SPLIT, HISTORY_LOADS, episodes, seed),
        "candidates": [float(v) for v in candidates],
        "distributions": list(DISTRIBUTIONS),
    }


def _same_tuning(fitted_on: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether a record's ``fitted_on`` is the tuning ``want`` of its price (its
    ``distributions``, where it has them, are read with its choice)."""
    without = {k: v for k, v in want.items() if k != "distributions"}
    return {k: v for k, v in fitted_on.items() if k != "distributions"} == without


def shipped_choices(path: Path = SHIPPED_CHOICES) -> list[dict[str, Any]]:
    """The tunings in ``path`` (a JSON list of records of ``mara history fit``: their
    ``fitted_on`` (:func:`tuning_record`), ``leads`` and ``miss_cost``, and where the
    distribution was chosen, ``distribution`` (by workload) and ``distribution_leads``)."""
    return json_file.loads(Path(path).read_text())


def write_choices(records: Sequence[dict[str, Any]], path: Path = SHIPPED_CHOICES) -> None:
    """Write tuning ``records`` to ``path`` (atomically), each replacing every record there
    of the same history settings (whatever its candidates, episodes or seed: a superseded tuning,
    which the reader no longer matches, is not left behind)."""
    path = Path(path)
    new = [r["fitted_on"]["cluster"] for r in records]
    old = shipped_choices(path) if path.exists() else []
    kept = [r for r in old if r["fitted_on"]["cluster"] not in new]
    atomic_write(path, (json.dumps(kept + list(records), indent=1) + "\n").encode())


class HistoryError(ValueError):
    """A cluster's history lacks what a run needs (its price of a miss is not tuned), or a
    history file is not one."""


def _tunings(path: Path) -> list[dict[str, Any]]:
    """The tuning records of a history file, each with its ``fitted_on`` and a price;
    :class:`HistoryError` naming the file otherwise."""
    try:
        records = shipped_choices(path)
        ok = isinstance(records, list) and all(
            isinstance(r, dict) and isinstance(r.get("fitted_on"), dict) and "miss_cost" in r
            for r in records
        )
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: cannot be read as a history file ({exc})") from None
    if not ok:
        raise HistoryError(
            f"{path}: expected a JSON list of tunings (each with fitted_on and miss_cost), as "
            "`mara history fit --out` writes"
        )
    return records


# a tuning's distribution per workload, as (workload, distribution) pairs in name order
Choices = tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=16)
def _tuning(key: str, files: tuple[str, ...]) -> tuple[float | None, Choices | None]:
    """The price of a miss and the chosen distributions (:func:`_choices`) of the tuning of
    history ``key`` in the shipped file or ``files`` (the last one read wins), each None
    where none holds it."""
    want = tuning_record(json.loads(key))
    found: tuple[float | None, Choices | None] = (None, None)
    for path in (SHIPPED_CHOICES, *files):
        for record in _tunings(Path(path)):
            if _same_tuning(record["fitted_on"], want):
                found = (float(record["miss_cost"]), _choices(record))
    return found


def _choices(record: dict[str, Any]) -> Choices | None:
    """The distributions tuning ``record`` chose per workload (None: it made no choice)."""
    chosen = record.get("distribution")
    return None if chosen is None else tuple(sorted(chosen.items()))


@dataclass(frozen=True, eq=False)
class ClusterHistory:
    """What a cluster's history says: built once by whoever starts a run (:meth:`of`), then
    handed to the schedulers and the policy that read it (``use_history``), which never
    fit or tune one themselves."""

    key: str  # the history settings it was drawn under (:func:`history_key`)
    jobs: str  # the workload its episodes run (``none``: synthetic)
    prior: DeadlinePrior  # fitted on both shipped workloads' train tasks (``prior=cluster``)
    workload_prior: DeadlinePrior  # on those of ``jobs`` alone (``prior=workload``)
    miss_cost: float | None  # hedge's price of a miss tuned on it; None: not tuned
    # the remaining-work distribution chosen on it for each workload (``predictor=cluster``;
    # a workload it does not hold keeps DISTRIBUTIONS[0]); None: not chosen
    distributions: Choices | None = None

    @classmethod
    def of(cls, config: ClusterConfig, files: Sequence[str | Path] = ()) -> ClusterHistory:
        """``config``'s cluster's history: the shipped prior where one was fitted on it,
        else a fit (once per process); the price and the distributions of
        :data:`SHIPPED_CHOICES` or of the tuning ``files`` (``mara history fit --out``)
        that hold them, else None."""
        key, jobs = history_key(config), config.jobs or "none"
        miss_cost, distributions = _tuning(key, tuple(str(f) for f in files))
        return cls(
            key=key,
            jobs=jobs,
            prior=_prior(HISTORY_JOBS, key),
            workload_prior=_prior((jobs,), key),
            miss_cost=miss_cost,
            distributions=distributions,
        )

    @property
    def tuned(self) -> bool:
        """Whether it holds both a price of a miss and a choice of distribution."""
        return self.miss_cost is not None and self.distributions is not None

    def tuned_from(self, record: dict[str, Any]) -> ClusterHistory:
        """This history with the price and the distributions of tuning ``record`` (what
        :func:`~mara_agents.evaluation.tuning.tune_history` returns)."""
        chosen = _choices(record)
        return dataclasses.replace(self, miss_cost=record["miss_cost"], distributions=chosen)

    def describes(self, config: ClusterConfig) -> bool:
        """Whether this is the history of ``config``'s cluster and workload."""
        return self.key == history_key(config) and self.jobs == (config.jobs or "none")

    def price(self) -> float:
        """The tuned price of a miss; :class:`HistoryError` naming the command that tunes
        it where there is none."""
        if self.miss_cost is None:
            raise self._untuned("price of a miss (hedge's miss_cost=")
        return self.miss_cost

    def distribution(self, jobs: str | None = None) -> str:
        """The remaining-work distribution chosen for workload ``jobs`` (default: its own;
        ``none``: synthetic) on this history, :data:`DISTRIBUTIONS`'s first where the
        history does not hold that workload; :class:`HistoryError` naming the command that
        chooses where no choice was made."""
        if self.distributions is None:
            raise self._untuned("choice of distribution (hedge's predictor=")
        return dict(self.distributions).get(jobs or self.jobs, DISTRIBUTIONS[0])

    def _untuned(self, what: str) -> HistoryError:
        return HistoryError(
            f"the cluster {self.key} has no tuned {what}{CLUSTER!r}): run `mara history "
            "fit --cluster FILE --out HISTORY.json` once and pass --history HISTORY.json"
        )
