"""The flow_share rule: uniform share, but no task gets more nodes than it confidently needs.

Every tick each active task *wants* :func:`confident_nodes`: the fewest nodes that finish
it ``slack`` ticks before its deadline if its remaining work is the ``quantile`` of the
predicted distribution (its cap when no count within the cap does, or while its prefix is
too short to predict).  Tasks in deadline order share the nodes round-robin up to their
wants, then up to their caps.  While the tasks want every node between them, a task whose
``drop`` quantile of remaining work cannot finish on its cap by its deadline is served
last.

Two users, each with its own parameters: the ``flow_share`` scheduler
(:mod:`mara_agents.baselines.flow_share`) and a policy's ``pred_nodes_needed`` and
``pred_share`` features (:mod:`mara_agents.policy.features`, whose teacher spec a policy
file records).  Numpy only (compiled with numba where installed).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flow_predictor.remaining import REFRESH, RemainingWork
from mara_env.compiled import maybe_njit
from mara_env.schedulers import round_robin, ticks_formula, warm_nodes

# The largest slack (ticks before the deadline) and refresh (a fraction of the reports).
MAX_SLACK = 1000
MAX_REFRESH = 10.0


@dataclass(frozen=True)
class FlowShareParams:
    """The rule's parameters (the defaults: those the shipped flow_share and policy use);
    each is checked against its range here (a spec's error names the knob and the range)."""

    quantile: float = 0.9  # want: this quantile of remaining work must fit ...
    slack: int = 2  # ... this many ticks before the deadline
    drop: float = 0.05  # triage: serve last if this quantile cannot finish (0: never)
    refresh: float = REFRESH  # predict again once a task's reports grew by this fraction

    def __post_init__(self) -> None:
        expected = {
            "quantile": "a quantile in (0, 1]",
            "slack": f"a whole number in [0, {MAX_SLACK}] of ticks",
            "drop": "a quantile in [0, 1) (0: off)",
            "refresh": f"a fraction in [0, {MAX_REFRESH:g}] of the reports",
        }
        for key, what in expected.items():
            value = getattr(self, key)
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = float("nan")
            ok = {
                "quantile": 0 < number <= 1,
                "slack": 0 <= number <= MAX_SLACK and number.is_integer(),
                "drop": 0 <= number < 1,
                "refresh": 0 <= number <= MAX_REFRESH,
            }[key]
            if not ok or isinstance(value, bool):
                raise ValueError(f"flow_share: {key}={value!r}; expected {what}")
            object.__setattr__(self, key, int(number) if key == "slack" else number)

    def to_dict(self) -> dict[str, float | int]:
        """Plain values (for a teacher's spec)."""
        return asdict(self)


DEFAULTS = FlowShareParams()


def nodes_needed(
    remaining: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
) -> np.ndarray:
    """Fewest nodes (1..cap) that finish ``remaining`` within ``time_left`` ticks; 0 if none.

    Warm-up is counted as in :func:`~mara_env.schedulers.ticks_needed`; ``inf``/``nan``
    remaining work gives 0.
    """
    remaining = np.asarray(remaining, np.float64)
    return _fewest_nodes(remaining[None, :], time_left, np.zeros(1), cap, warm, rate, alpha)[0]


_ticks = maybe_njit(cache=True, error_model="numpy")(ticks_formula)


# the dtypes of _first_fits' arguments: work, time_left, slacks, cap, warm, rate, alpha
_FIRST_FITS_DTYPES = (
    np.float64,
    np.float64,
    np.float64,
    np.int64,
    np.float64,
    np.float64,
    np.float64,
)


def _fewest_nodes(*arrays: np.ndarray) -> np.ndarray:
    """:func:`nodes_needed` of every row ``work[r]`` (tasks along axis 1) with ``time_left -
    slacks[r]`` ticks left, in one call, ``(rows, tasks)``: :func:`_first_fits` of
    ``arrays`` (its arguments, in its order) in its dtypes."""
    work = np.asarray(arrays[0])
    if not work.shape[1]:
        return np.zeros(work.shape, np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):  # what ticks_needed ignores
        return _first_fits(*(np.asarray(a, t) for a, t in zip(arrays, _FIRST_FITS_DTYPES)))


@maybe_njit(cache=True, error_model="numpy")
def _first_fits(
    work: np.ndarray,
    time_left: np.ndarray,
    slacks: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
) -> np.ndarray:
    """The fewest nodes (1..``cap[i]``) whose ticks fit ``time_left[i] - slacks[r]`` for
    every task ``i`` and row ``work[r]`` of remaining work (0: none, or unknown work);
    float64 arrays, ``cap`` int64.  Compiled with numba where it is installed: per row,
    ticks on 1..max(cap) nodes for every task, then the first fit."""
    col = (-1, 1)
    n = np.arange(1, cap.max() + 1).astype(np.float64).reshape(1, -1)
    need = np.zeros(work.shape, np.int64)
    for r in range(work.shape[0]):
        row = work[r]
        ticks = _ticks(
            row.reshape(col), n, warm.reshape(col), rate.reshape(col), alpha.reshape(col)
        )
        for i in range(len(row)):
            if np.isfinite(row[i]):
                left = time_left[i] - slacks[r]
                for j in range(cap[i]):
                    if ticks[i, j] <= left:
                        need[r, i] = j + 1
                        break
    return need


# Some tasks of one simulation (flow_share's rule takes a list of them: several at once).
SimTasks = tuple[Any, np.ndarray]


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` end to end (the one part itself: no copy on a scheduler's every tick)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def rule_columns(items: Sequence[SimTasks]) -> tuple[np.ndarray, ...]:
    """What the rule reads of the tasks of every ``(sim, tasks)`` of ``items``, end to end:
    ticks left to the deadline, cap, warm nodes, rate and alpha."""
    columns = [
        (
            sim.workload.deadline[tasks] - sim.t,
            sim.workload.cap[tasks],
            warm_nodes(sim, tasks),
            sim.workload.rate[tasks],
            sim.workload.alpha[tasks],
        )
        for sim, tasks in items
    ]
    return tuple(joined(list(c)) for c in zip(*columns))


def _nodes_for(items: Sequence[SimTasks], work: np.ndarray, slacks: Sequence[int]) -> np.ndarray:
    """:func:`nodes_needed` for each row ``work[p]`` (the tasks of every ``(sim, tasks)`` of
    ``items``, in order) with ``slacks[p]`` ticks to spare, in one call."""
    left, cap, warm, rate, alpha = rule_columns(items)
    return _fewest_nodes(np.asarray(work, np.float64), left, slacks, cap, warm, rate, alpha)


def nodes_to_finish(sim: Any, tasks: np.ndarray, work: np.ndarray, slack: int) -> np.ndarray:
    """:func:`nodes_needed` for ``work`` left in each of ``tasks``, ``slack`` ticks early."""
    return _nodes_for([(sim, tasks)], np.asarray(work, np.float64)[None, :], [slack])[0]


@maybe_njit(cache=True, error_model="numpy")
def want_and_count(
    upper: np.ndarray,
    low: np.ndarray,
    fallback: np.ndarray,
    left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    slack: float,
    triage: bool,
    starts: np.ndarray,
    num_nodes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The rule's want and count of every task of each simulation ``s`` (tasks
    ``starts[s]:starts[s + 1]``, in deadline order).

    A task wants the fewest nodes that finish ``upper`` (remaining work) ``slack`` ticks
    before its deadline, its cap when none within it does or its prediction is a fallback.
    With ``triage``, a task is hopeless when not even ``low`` finishes on its cap by its
    deadline, unless its prediction is a fallback or unknown; while the others want at
    least the simulation's ``num_nodes``, hopeless tasks are served last.  Each
    simulation's tasks then share its nodes (:func:`~mara_env.schedulers.round_robin`) up
    to their wants, then up to their caps."""
    n = len(upper)
    work = np.empty((2 if triage else 1, n))
    slacks = np.array([slack, 0.0])[: work.shape[0]]
    for i in range(n):
        work[0, i] = np.inf if fallback[i] else upper[i]
        if triage:
            work[1, i] = np.nan if fallback[i] else low[i]
    need = _first_fits(work, left, slacks, cap, warm, rate, alpha)
    want = np.where(need[0] > 0, need[0], cap)
    counts = np.empty_like(want)
    for s in range(len(starts) - 1):
        a, b = starts[s], starts[s + 1]
        last = np.zeros(b - a, np.bool_)
        if triage and want[a:b].sum() >= num_nodes[s]:  # else the cluster covers every want
            others = 0
            for i in range(a, b):
                # nan (fallback or unknown) gives 0 from the first fit as well: not hopeless
                last[i - a] = need[1, i] == 0 and not fallback[i] and not np.isnan(low[i])
                if not last[i - a]:
                    others += want[i]
            if others < num_nodes[s]:  # the others do not fill the cluster: no one last
                last[:] = False
        counts[a:b] = round_robin(cap[a:b], want[a:b], last, num_nodes[s])
    return want, counts


# the dtypes of rule_columns' columns (ticks left, cap, warm nodes, rate, alpha) and of
# want_and_count' array arguments, in their order (slack and triage are scalars)
RULE_COLUMN_DTYPES = (np.float64, np.int64, np.float64, np.float64, np.float64)
_RULE_DTYPES = (np.float64, np.float64, np.bool_, *RULE_COLUMN_DTYPES)


def segments(items: Sequence[SimTasks]) -> tuple[np.ndarray, np.ndarray]:
    """Where each simulation's tasks start in the rows of ``items`` (and where the last
    ends), and each simulation's nodes."""
    starts = [0, *itertools.accumulate(len(tasks) for _, tasks in items)]
    nodes = [sim.config.num_nodes for sim, _ in items]
    return np.array(starts, np.int64), np.array(nodes, np.int64)


def rule_counts(
    items: Sequence[SimTasks],
    rw: RemainingWork,
    upper: np.ndarray,
    slack: int,
    low: np.ndarray | None,
    columns: tuple[np.ndarray, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`want_and_count` of the tasks of every ``(sim, tasks)`` of ``items``, whose predictions
    are the rows of ``rw`` (``upper`` and ``low``: its quantiles, ``low`` None: no triage;
    ``columns``: :func:`rule_columns` of ``items`` if already gathered)."""
    if not len(upper):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    columns = rule_columns(items) if columns is None else columns
    arrays = (upper, upper if low is None else low, rw.fallback, *columns)
    typed = [np.asarray(x, t) for x, t in zip(arrays, _RULE_DTYPES)]
    with np.errstate(invalid="ignore", divide="ignore"):  # what ticks_needed ignores
        return want_and_count(*typed, float(slack), low is not None, *segments(items))


def confident_nodes(
    sim: Any,
    tasks: np.ndarray,
    rw: RemainingWork,
    quantile: float = DEFAULTS.quantile,
    slack: int = DEFAULTS.slack,
    upper: np.ndarray | None = None,
) -> np.ndarray:
    """Fewest nodes that finish each task ``slack`` ticks before its deadline if its
    remaining work is the predicted ``quantile``; its cap when no count within the cap
    does, or when the prediction is a fallback (prefix too short) or unknown.

    ``rw`` holds the predictions of ``tasks`` (remaining work from now, as
    :meth:`PredictionCache.get` gives it); ``upper``: its ``quantile`` if already computed.
    """
    if upper is None:
        upper = rw.quantiles([quantile])[:, 0]
    return rule_counts([(sim, tasks)], rw, upper, slack, None)[0]


def flow_share_counts(
    sim: Any,
    tasks: np.ndarray,
    rw: RemainingWork,
    quantile: float = DEFAULTS.quantile,
    slack: int = DEFAULTS.slack,
    drop: float | None = DEFAULTS.drop,
    qs: dict[float, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``flow_share``'s want (:func:`confident_nodes`) and count of each of ``tasks``.

    ``tasks`` in deadline order share the nodes round-robin
    (:func:`~mara_env.schedulers.fair_share`), first up to their wants, then up to their
    caps.  With ``drop``: a task is *hopeless* when even the
    ``drop`` quantile of its remaining work cannot be done by its deadline on its cap (not
    while its prediction is a fallback); while the other tasks want at least every node,
    hopeless ones get only what is left once the others reach their caps.
    ``qs``: quantiles of ``rw`` already computed, by level.  Returns ``(want, counts)``,
    both aligned with ``tasks``.
    """
    return flow_share_counts_many([(sim, tasks)], rw, quantile, slack, drop, qs)


def flow_share_counts_many(
    items: Sequence[SimTasks],
    rw: RemainingWork,
    quantile: float = DEFAULTS.quantile,
    slack: int = DEFAULTS.slack,
    drop: float | None = DEFAULTS.drop,
    qs: dict[float, np.ndarray] | None = None,
    columns: tuple[np.ndarray, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`flow_share_counts` of the tasks of every ``(sim, tasks)`` of ``items`` (several
    simulations, each shared by its own tasks), whose predictions are the rows of ``rw`` in
    that order; ``want`` and ``counts`` in that order too (``columns``:
    :func:`rule_columns` of ``items`` if already gathered)."""
    qs = dict(qs or {})
    missing = [q for q in (quantile, drop) if q and q not in qs]
    if missing:  # one sort of the samples for every level still needed
        qs.update(zip(missing, rw.quantiles(missing).T))
    return rule_counts(items, rw, qs[quantile], slack, qs[drop] if drop else None, columns)
