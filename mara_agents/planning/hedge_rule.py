"""The hedge planner's rule: chances of finishing, a greedy knapsack on them, this tick's counts.

The arithmetic of :mod:`mara_agents.baselines.hedge` (its docstring is the specification)
on arrays, with no simulation, beside its knobs (:class:`HedgeParams`): the ``hedge``
scheduler calls :func:`plan_counts` on the active tasks, and a policy whose teacher is
hedge reads the same call on the visible ones as its ``pred_share``
(:mod:`mara_agents.policy.features`).  Numpy only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from mara_agents.planning.history import CLUSTER, check_source
from mara_env.schedulers import fill_caps, spread, ticks_needed

# The largest quantile count: a chance resolved to 1/4096; the planner's arrays grow with it
# (tasks x quantiles x nodes).
MAX_QUANTILES = 4096
MAX_FLOW_SPREAD = 100.0
MAX_LIGHT = 100.0
MAX_WAIT = 1000


@dataclass(frozen=True)
class HedgeParams:
    """The planner's knobs, with the defaults chosen on the validation split; each is
    checked against its range here (a spec's error names the knob and the range)."""

    confidence: float = 0.05  # a task is pursued only if some count has this chance
    flow_spread: float = 2.0  # flow+deadline: the flow model's log spread times this
    quantiles: int = 256  # task, flow+deadline, deadline: evenly spaced quantiles read
    urgency: float = 1.0  # a step's value: chance now less this times the chance after a wait
    wait: int = 15  # urgency's wait, in ticks (acts only with urgency > 0)
    # node-ticks a sample that misses the deadline is charged: this share of the time left
    # (1: its nodes held to the deadline; CLUSTER: the price tuned on the cluster's
    # history, :attr:`ClusterHistory.miss_cost`, resolved per cluster by :meth:`on_cluster`)
    miss_cost: float | str = CLUSTER
    # while the load the arrived tasks' deadlines imply (DeadlinePrior.observed_load) is
    # below this, the plan is earliest deadline first at caps (0: never)
    light: float = 0.0

    def to_dict(self) -> dict[str, float | int | str]:
        """Plain values (for a teacher's spec); ``wait`` only with ``urgency``, and ``light``
        only when it acts, so that a spec without it reads as it did before it existed
        (a spec without ``urgency`` was written while urgency was off:
        :func:`~mara_agents.policy.policy_file.recorded_teacher`)."""
        values = asdict(self)
        if not values["light"]:
            del values["light"]
        if not values["urgency"]:
            del values["wait"]
        return values

    @property
    def prices_by_cluster(self) -> bool:
        """Whether ``miss_cost`` is the cluster's tuned price (:data:`CLUSTER`)."""
        return self.miss_cost == CLUSTER

    def on_cluster(self, miss_cost: float) -> HedgeParams:
        """These knobs with ``miss_cost`` where they say :data:`CLUSTER` (the price tuned
        on the cluster's history), else unchanged."""
        return replace(self, miss_cost=miss_cost) if self.prices_by_cluster else self

    def __post_init__(self) -> None:
        checks = {
            "confidence": (lambda v: 0 < v <= 1, "a probability in (0, 1]"),
            "flow_spread": (
                lambda v: 0 < v <= MAX_FLOW_SPREAD,
                f"a factor in (0, {MAX_FLOW_SPREAD:g}]",
            ),
            "urgency": (lambda v: 0 <= v <= 1, "a weight in [0, 1]"),
            "wait": (
                lambda v: 1 <= v <= MAX_WAIT and float(v).is_integer(),
                f"a whole number of ticks in [1, {MAX_WAIT}]",
            ),
            "light": (lambda v: 0 <= v <= MAX_LIGHT, f"a load in [0, {MAX_LIGHT:g}]"),
            "miss_cost": (
                lambda v: 0 <= v <= 1,
                f"a share of the time left in [0, 1], or {CLUSTER!r}",
            ),
            "quantiles": (
                lambda v: 1 <= v <= MAX_QUANTILES and float(v).is_integer(),
                f"a whole number in [1, {MAX_QUANTILES}]",
            ),
        }
        check_source("hedge: miss_cost", self.miss_cost)
        for key, (ok, what) in checks.items():
            value = getattr(self, key)
            if key == "miss_cost" and value == CLUSTER:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ValueError(f"hedge: {key}={value!r}; expected {what}")
        object.__setattr__(self, "confidence", float(self.confidence))
        object.__setattr__(self, "flow_spread", float(self.flow_spread))
        object.__setattr__(self, "quantiles", int(self.quantiles))
        object.__setattr__(self, "urgency", float(self.urgency))
        object.__setattr__(self, "wait", int(self.wait))
        object.__setattr__(self, "light", float(self.light))
        if self.miss_cost != CLUSTER:
            object.__setattr__(self, "miss_cost", float(self.miss_cost))


DEFAULTS = HedgeParams()


@dataclass
class HedgePlan:
    """The planner's view of the predicted tasks it was given (arrays in that order)."""

    counts: np.ndarray  # nodes this tick
    kept: np.ndarray  # bool: pursued (given nodes by the knapsack)
    chance: np.ndarray  # (tasks, max cap + 1): p_k(n), column 0 is 0


def finish_chances(
    samples: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    miss_cost: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``p_k(n)`` and ``c_k(n)`` of every task (rows) and count ``n = 0..max(cap)``
    (columns): the share of ``samples`` (tasks x samples of remaining work) that ``n`` nodes
    held from now on finish within ``time_left``, and the node-ticks they then hold (until
    done; a sample that misses the deadline is charged ``miss_cost`` times the time left),
    averaged over the samples (``inf`` beyond the cap; count 0: chance 0, no node-ticks)."""
    n = _counts(cap)
    return _chances_and_costs(_ticks(samples, n, warm, rate, alpha), n, time_left, cap, miss_cost)


def _counts(cap: np.ndarray) -> np.ndarray:
    """The node counts ``1..max(cap)`` the chances are read at."""
    return np.arange(1, int(cap.max(initial=1)) + 1, dtype=np.float64)


def _ticks(
    samples: np.ndarray, n: np.ndarray, warm: np.ndarray, rate: np.ndarray, alpha: np.ndarray
) -> np.ndarray:
    """Ticks each sample (tasks x samples) needs on each count of ``n`` (last axis)."""
    return ticks_needed(
        samples[:, :, None],
        n[None, None, :],
        warm[:, None, None],
        rate[:, None, None],
        alpha[:, None, None],
    )


def _in_time(
    ticks: np.ndarray, n: np.ndarray, time_left: np.ndarray, cap: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which samples' ``ticks`` fit in ``time_left``, and the chance per count (0 beyond the
    cap, and a column of 0 for count 0)."""
    with np.errstate(invalid="ignore"):  # inf work: never in time, a miss
        ok = ticks <= time_left[:, None, None]
    chance = ok.mean(axis=1)
    chance[n[None, :] > cap[:, None]] = 0.0
    return ok, np.hstack([np.zeros((len(ticks), 1)), chance])


def _chances_and_costs(
    ticks: np.ndarray, n: np.ndarray, time_left: np.ndarray, cap: np.ndarray, miss_cost: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`finish_chances` of ``ticks`` (:func:`_ticks`)."""
    ok, chance = _in_time(ticks, n, time_left, cap)
    held = np.where(ok, ticks, miss_cost * time_left[:, None, None])
    cost = n[None, :] * held.mean(axis=1)
    cost[n[None, :] > cap[:, None]] = np.inf
    return chance, np.hstack([np.zeros((len(ticks), 1)), cost])


def hedge_plan(
    samples: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    capacity: int,
    miss_cost: float,
    confidence: float = DEFAULTS.confidence,
    urgency: float = 0.0,
    wait: int = 1,
) -> HedgePlan:
    """Steps 2-4 of the module docstring for tasks in earliest-deadline order, on
    ``capacity`` free nodes.  Nodes that no kept task can use are left for the caller
    (``Hedge.plan`` gives them to exploring tasks, then to the others).  With ``urgency``
    ``u > 0`` the knapsack weighs ``p_k(n) - u * p'_k(n)`` instead of ``p_k(n)``, where
    ``p'_k(n)`` is the chance of the same count started ``wait`` ticks later (every node
    cold): the chance waiting would lose.  (Off here unless given; the planner's defaults
    are :class:`HedgeParams`', which :func:`plan_counts` passes.)"""
    k = len(samples)
    counts = np.zeros(k, np.int64)
    if k == 0:
        return HedgePlan(counts, np.zeros(0, bool), np.zeros((0, 1)))
    n = _counts(cap)
    ticks = _ticks(samples, n, warm, rate, alpha)
    chance, cost = _chances_and_costs(ticks, n, time_left, cap, miss_cost)
    pursued = (chance >= confidence - 1e-12).any(axis=1)
    value = chance
    if urgency > 0:
        # on cold nodes: a task holding none needs the ticks it needs now
        hot = warm > 0
        cold = ticks
        if hot.any():
            cold = ticks.copy()
            cold[hot] = _ticks(samples[hot], n, np.zeros(int(hot.sum())), rate[hot], alpha[hot])
        value = chance - urgency * _in_time(cold, n, time_left - wait, cap)[1]
    open_ = np.isfinite(cost) & pursued[:, None]
    column = np.arange(chance.shape[1])[None, :]
    rows = np.arange(k)
    left = capacity
    while left > 0:
        now = value[rows, counts][:, None]
        step = column - counts[:, None]
        ok = open_ & (step > 0) & (step <= left) & (value > now + 1e-12)
        if not ok.any():
            break
        # value (chance, less urgency's) gained per node-tick added (a step that also saves
        # node-ticks: first)
        added = np.maximum(cost - cost[rows, counts][:, None], 1e-9)
        with np.errstate(invalid="ignore"):
            gain = np.where(ok, (value - now) / added, -np.inf)
        i, n = np.unravel_index(np.argmax(gain), gain.shape)
        left -= int(n - counts[i])
        counts[i] = n
    kept = counts > 0
    for want in (np.where(kept, np.minimum(warm, cap), 0), np.where(kept, cap, 0)):
        left = spread(counts, np.asarray(want, np.int64), left)
    return HedgePlan(counts, kept, chance)


def plan_counts(
    samples: np.ndarray,
    unknown: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    num_nodes: int,
    params: HedgeParams,
    load: float | None = None,
) -> tuple[np.ndarray, HedgePlan]:
    """This tick's nodes of tasks in earliest-deadline order (rows of every array), and the
    plan of the ``~unknown`` ones: tasks whose prediction is ``unknown`` explore (step 1 of
    the specification: a uniform share of the nodes each, at least one, as LARA explores),
    the others are planned on ``num_nodes`` less theirs
    (:func:`hedge_plan`), and the nodes no kept task can use go to exploring tasks, then to
    the others, up to their caps.  While ``load`` (the cluster's observed load,
    :meth:`~flow_predictor.deadline_prior.DeadlinePrior.observed_load`; None: unknown) is
    below ``params.light``, the nodes go instead in deadline order, each task its cap
    (earliest deadline first), and the plan is still returned."""
    if params.prices_by_cluster:
        raise ValueError(
            f"hedge: miss_cost={CLUSTER!r} is a price per cluster; plan with "
            "params.on_cluster(ClusterHistory.of(config).price())"
        )
    k = len(cap)
    cap = np.asarray(cap, np.int64)
    share = max(1, num_nodes // max(k, 1))
    counts = np.zeros(k, np.int64)
    left = num_nodes
    for i in np.flatnonzero(unknown):  # exploring tasks in deadline order, while nodes last
        counts[i] = min(share, int(cap[i]), left)
        left -= counts[i]
    planned = np.flatnonzero(~unknown)
    plan = hedge_plan(
        np.asarray(samples[planned], np.float64),
        np.asarray(time_left[planned], np.float64),
        cap[planned],
        np.asarray(warm[planned], np.float64),
        np.asarray(rate[planned], np.float64),
        np.asarray(alpha[planned], np.float64),
        left,
        params.miss_cost,
        params.confidence,
        params.urgency,
        params.wait,
    )
    counts[planned] = plan.counts
    left = num_nodes - int(counts.sum())
    for rows in (np.flatnonzero(unknown), planned[~plan.kept]):
        got = counts[rows]
        left = spread(got, cap[rows], left)
        counts[rows] = got
    if load is not None and load < params.light:
        counts = fill_caps(cap, num_nodes)
    return counts, plan
