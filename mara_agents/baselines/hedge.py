"""hedge: chance-constrained Moore–Hodgson on the remaining-work distribution.

A planner that decides, every tick, which present tasks to pursue and with how many nodes
from the *distribution* of each task's remaining work (the flow predictor's samples), not
from a point estimate.  Each tick, for the active tasks in earliest-deadline order:

1. **Explore.** A task the predictor cannot predict yet (fewer than
   :data:`~flow_predictor.remaining.MIN_REPORTS` reports) gets ``explore`` nodes (within
   its cap; 0: a uniform share of the nodes, at least one, as LARA explores).
2. **Chance of finishing.** For every other task ``k`` and every count ``n`` up to its cap,
   ``p_k(n)``: the share of its remaining-work samples that ``n`` nodes held from now on
   finish by its deadline (a joining node gives nothing in its first tick, speed-up
   ``rate * n**alpha``), and ``c_k(n)``: the node-ticks it then holds, averaged over the
   samples (until it finishes, or its deadline).  Its planned count ``n_k`` is the count
   with the fewest expected node-ticks among those with ``p_k(n) >= confidence``; a task
   with no such count is not a candidate.
3. **Admission** (Moore–Hodgson, hedged): candidates join the kept set in deadline order.
   While the kept counts exceed the cluster, or the kept tasks' expected node-ticks exceed
   what the cluster offers by the deadline of the task just added, the kept task with the
   most expected node-ticks per unit of probability (``c_k / p_k``) is dropped.  While tasks
   keep arriving, a ``reserve`` share of the capacity beyond ``lead`` ticks from now is held
   back for them, so that nodes are not sunk into a large task that a stream of small ones
   would out-value.
4. **This tick.** Kept tasks get ``n_k`` in deadline order; each leftover node goes to the
   task whose probability of finishing it raises most (its count held from now on), then,
   round-robin in deadline order, to kept tasks' warm nodes, to kept tasks up to their
   caps, to exploring tasks up to theirs, and to the others: idle nodes help nobody.
   Moves are priced by the planning itself: the probabilities and node-ticks count the
   tick a joining node loses.

``predictor="oracle"`` (or ``"exact"``) runs the same code on each task's exact remaining
work from its arrival on (``sim.remaining_true``: one sample, a degenerate distribution),
so ``p_k(n)`` is 0 or 1, nothing explores, and the planner is LARA's oracle with the
hedged admission above.  The gap between the two is what prediction costs this planner.

**Assumes** that the simulator's throughput model (``rate``, ``alpha``, the warm-up of a
joining node) is what the cluster does; that the flow predictor's samples are a calibrated
distribution of the work left (the planner treats tasks as independent and never
re-weights samples); that a task holds its planned count until it finishes or its deadline
passes (it re-plans every tick, so this is only how a plan is priced); and that tasks which
arrived within the last ``lead`` ticks mean more will come.  It knows nothing of the
workload generator (arrival rate, size or slack ranges).  Knobs (``confidence``,
``reserve``, ``lead``) were tuned on the validation split only (``docs/baselines.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flow_predictor.remaining import PredictionCache, RemainingWork
from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler, edf_order, fill_in_order, spread, ticks_needed

# What ``predictor=`` may name: the flow model, or each task's exact remaining work
# (``oracle`` and ``exact`` are the same thing: both names read as "knows the work").
PREDICTORS = ("flow", "oracle", "exact")


@dataclass(frozen=True)
class HedgeParams:
    """The planner's knobs, with the defaults chosen on the validation split."""

    confidence: float = 0.2  # a kept task's count must finish with at least this chance
    reserve: float = 0.0  # share of the capacity beyond ``lead`` ticks kept for arrivals
    lead: int = 4  # ticks from now that the reserve leaves to the present tasks
    explore: int = 0  # nodes for a task not yet predicted (0: uniform share, as LARA)
    tail: float = 0.0  # flow samples past its horizon: up to this times it (0: never)
    assure: float = 0.9  # kept tasks first share up to counts this sure (0: off)

    def __post_init__(self) -> None:
        checks = {
            "confidence": (lambda v: 0 < v <= 1, "a probability in (0, 1]"),
            "reserve": (lambda v: 0 <= v < 1, "a share in [0, 1)"),
            "lead": (lambda v: v >= 0 and float(v).is_integer(), "a whole number >= 0 of ticks"),
            "assure": (lambda v: 0 <= v <= 1, "a probability in [0, 1] (0: off)"),
            "tail": (lambda v: v == 0 or v >= 1, "0 (never) or a factor >= 1"),
            "explore": (lambda v: v >= 0 and float(v).is_integer(), "a whole number >= 0 of nodes"),
        }
        for key, (ok, what) in checks.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ValueError(f"hedge: {key}={value!r}; expected {what}")
        object.__setattr__(self, "lead", int(self.lead))
        object.__setattr__(self, "explore", int(self.explore))


DEFAULTS = HedgeParams()


class CensoredFlow:
    """The flow model's remaining-work samples with its "not reached" ones read as what
    they are: censored, not infinite (the interface of
    :class:`~flow_predictor.remaining.PredictionCache`).

    The model's trajectories end at the last of its ``FUTURE_RATIOS``
    (24) times the work at the prediction; a sample that does not reach the target by then
    says only that the total work is beyond that.  Those of a task are spread log-uniformly
    over ``[bound, tail * bound]`` (``bound``: that horizon, counted from the task's last
    report, less the work done since); ``tail`` 0 keeps them ``inf`` (never).
    """

    def __init__(self, cache: PredictionCache, horizon: float, tail: float) -> None:
        self.cache = cache
        self.horizon = float(horizon)
        self.tail = float(tail)

    def clear(self) -> None:
        """Forget every task (new episode)."""
        self.cache.clear()

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        rw = self.cache.get(sim, tasks)
        never = np.isinf(rw.samples)
        if not self.tail or not never.any():
            return rw
        last = np.array([sim.hist_work[k][-1] if sim.hist_work[k] else 0.0 for k in tasks])
        bound = np.maximum((1.0 + self.horizon) * last - sim.work[tasks], 0.0)
        rank = np.cumsum(never, axis=1) - 0.5
        spread = self.tail ** (rank / np.maximum(never.sum(axis=1), 1)[:, None])
        samples = np.where(never, bound[:, None] * spread, rw.samples)
        return RemainingWork(samples, rw.fallback)


class ExactRemaining:
    """Each task's exact remaining work as a one-sample :class:`RemainingWork` from its
    arrival on (the interface of :class:`~flow_predictor.remaining.PredictionCache`)."""

    def clear(self) -> None:
        """Nothing to forget (stateless)."""

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        return RemainingWork(sim.remaining_true(tasks)[:, None], np.zeros(len(tasks), bool))


@dataclass
class HedgePlan:
    """The planner's view of the predicted tasks it was given (arrays in that order)."""

    counts: np.ndarray  # nodes this tick
    kept: np.ndarray  # bool: pursued (admitted)
    target: np.ndarray  # planned count n_k (0: not a candidate)
    chance: np.ndarray  # (tasks, max cap + 1): p_k(n), column 0 is 0


def finish_chances(
    samples: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``p_k(n)`` and ``c_k(n)`` of every task (rows) and count ``n = 0..max(cap)``
    (columns): the share of ``samples`` (tasks x samples of remaining work) that ``n`` nodes
    held from now on finish within ``time_left``, and the node-ticks they then hold (until
    done or the deadline), averaged over the samples (``inf`` beyond the cap; count 0:
    chance 0, no node-ticks)."""
    k = len(samples)
    n = np.arange(1, int(cap.max(initial=1)) + 1, dtype=np.float64)
    ticks = ticks_needed(
        samples[:, :, None],
        n[None, None, :],
        warm[:, None, None],
        rate[:, None, None],
        alpha[:, None, None],
    )
    left = time_left[:, None, None]
    with np.errstate(invalid="ignore"):  # inf work: never in time, held to the deadline
        ok = ticks <= left
        held = np.where(ok, ticks, left)
    chance = ok.mean(axis=1)
    cost = n[None, :] * held.mean(axis=1)
    over = n[None, :] > cap[:, None]
    chance[over] = 0.0
    cost[over] = np.inf
    zero = np.zeros((k, 1))
    return np.hstack([zero, chance]), np.hstack([zero, cost])


def hedge_plan(
    samples: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    num_nodes: int,
    capacity: int,
    params: HedgeParams = DEFAULTS,
    arriving: bool = True,
) -> HedgePlan:
    """Steps 2-4 of the module docstring for tasks in earliest-deadline order, on
    ``capacity`` free nodes of a ``num_nodes`` cluster; ``arriving``: tasks still come.
    Nodes that no kept task can use are left for the caller (``Hedge.plan`` gives them to
    exploring tasks, then to the others)."""
    k = len(samples)
    counts = np.zeros(k, np.int64)
    if k == 0:
        return HedgePlan(counts, np.zeros(0, bool), counts.copy(), np.zeros((0, 1)))
    chance, cost = finish_chances(samples, time_left, cap, warm, rate, alpha)
    admissible = chance >= params.confidence - 1e-12
    admissible[:, 0] = False
    priced = np.where(admissible, cost, np.inf)
    target = np.argmin(priced, axis=1)
    rows = np.arange(k)
    candidate = np.isfinite(priced[rows, target])
    target = np.where(candidate, target, 0)
    demand = cost[rows, target].tolist()
    value = chance[rows, target].tolist()

    # Moore-Hodgson in deadline order, as if every kept task ran at once (which also keeps
    # their node-ticks within what the cluster offers by each deadline), dropping the
    # dearest per unit of chance; nodes held beyond ``lead`` ticks leave the reserve free
    nodes = target.tolist()
    long = [d > params.lead * n for d, n in zip(demand, nodes)]
    room = num_nodes * (1.0 - (params.reserve if arriving else 0.0))
    kept: list[int] = []
    used = used_long = 0
    for i in np.flatnonzero(candidate).tolist():
        kept.append(i)
        used += nodes[i]
        used_long += nodes[i] * long[i]
        while used > num_nodes or used_long > room:
            j = max(kept, key=lambda m: (demand[m] / value[m], nodes[m], m))
            kept.remove(j)
            used -= nodes[j]
            used_long -= nodes[j] * long[j]
    is_kept = np.zeros(k, bool)
    is_kept[kept] = True

    left = capacity
    if params.assure > 0:  # kept tasks share round-robin up to an assured count first
        sure = chance >= params.assure - 1e-12
        sure[:, 0] = False
        want = np.where(sure.any(axis=1), np.argmax(sure, axis=1), cap)
        want = np.where(is_kept, np.maximum(want, target), 0)
        left = spread(counts, np.asarray(want, np.int64), left)
    for i in kept:
        more = min(int(target[i]) - int(counts[i]), left) if left > 0 else 0
        counts[i] += max(more, 0)
        left -= max(more, 0)
    left = _most_chance(counts, chance, cap, left)
    for want in (np.where(is_kept, np.minimum(warm, cap), 0), np.where(is_kept, cap, 0)):
        left = spread(counts, np.asarray(want, np.int64), left)
    return HedgePlan(counts, is_kept, target, chance)


def _most_chance(counts: np.ndarray, chance: np.ndarray, cap: np.ndarray, left: int) -> int:
    """Give nodes one at a time to the task whose chance of finishing one more node raises
    most (while some does); ``counts`` changed in place; returns the nodes left."""
    rows = np.arange(len(counts))
    while left > 0:
        room = counts < cap
        nxt = np.minimum(counts + 1, chance.shape[1] - 1)
        gain = np.where(room, chance[rows, nxt] - chance[rows, counts], 0.0)
        best = int(np.argmax(gain))
        if gain[best] <= 1e-12:
            break
        counts[best] += 1
        left -= 1
    return left


class Hedge(Scheduler):
    """The hedge planner (this module's docstring) as a scheduler.

    ``predictor``: ``"flow"`` (the shipped flow checkpoint with ``flow_share``'s sample
    count and refresh rule; needs the ``[predictor]`` extra) or ``"oracle"``/``"exact"``
    (each task's exact remaining work: the same planner on a degenerate distribution).
    ``confidence``, ``reserve``, ``lead``, ``explore``, ``tail``, ``assure``: see
    :class:`HedgeParams` (None: its default).
    """

    name = "hedge"

    def __init__(
        self,
        predictor: str = "flow",
        confidence: float | None = None,
        reserve: float | None = None,
        lead: int | None = None,
        explore: int | None = None,
        tail: float | None = None,
        assure: float | None = None,
    ) -> None:
        if predictor not in PREDICTORS:
            raise ValueError(f"hedge: predictor={predictor!r}; expected one of {PREDICTORS}")
        given = {
            "confidence": confidence,
            "reserve": reserve,
            "lead": lead,
            "explore": explore,
            "tail": tail,
            "assure": assure,
        }
        self.params = HedgeParams(**{k: v for k, v in given.items() if v is not None})
        if predictor == "flow":
            from mara_agents.extras import require

            require("predictor")  # checked here, in the parent, not in a worker
        self.predictor = predictor
        self._predictions: CensoredFlow | ExactRemaining | None = None
        self._last_arrival = -(10**9)

    def _make_predictions(self) -> CensoredFlow | ExactRemaining:
        if self.predictor != "flow":
            return ExactRemaining()
        from flow_predictor.checkpoint import load_predictor
        from flow_predictor.features import FUTURE_RATIOS
        from flow_predictor.flow import FLOW_SAMPLES
        from flow_predictor.share_rule import DEFAULTS as SHARE

        cache = PredictionCache(load_predictor(n_samples=FLOW_SAMPLES), SHARE.refresh)
        return CensoredFlow(cache, FUTURE_RATIOS[-1], self.params.tail)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        if self._predictions is None:
            self._predictions = self._make_predictions()
        self._predictions.clear()
        self._last_arrival = -(10**9)

    def predictions(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining-work distribution of ``tasks`` the planner plans with."""
        return self._predictions.get(sim, tasks)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        return self.plan(sim, self.predictions(sim, edf_order(sim)))[0]

    def plan(self, sim: Any, rw: RemainingWork) -> tuple[np.ndarray, HedgePlan]:
        """Nodes per task (length = tasks in the episode) for the active tasks in deadline
        order, whose predictions are ``rw``, and the plan of the predicted ones."""
        order = edf_order(sim)
        wl = sim.workload
        if len(order) and wl.arrival[order].max() >= self._last_arrival:
            self._last_arrival = int(wl.arrival[order].max())
        unknown = rw.fallback | np.isnan(rw.samples).any(axis=1)
        share = self.params.explore or max(1, sim.config.num_nodes // max(len(order), 1))
        exploring = order[unknown]
        counts = fill_in_order(sim, exploring, np.full(len(exploring), share))
        planned = order[~unknown]
        plan = hedge_plan(
            np.asarray(rw.samples[~unknown], np.float64),
            (wl.deadline[planned] - sim.t).astype(np.float64),
            wl.cap[planned],
            sim.nodes_now[planned].astype(np.float64),
            wl.rate[planned],
            wl.alpha[planned],
            sim.config.num_nodes,
            sim.config.num_nodes - int(counts.sum()),
            self.params,
            arriving=sim.t - self._last_arrival <= self.params.lead,
        )
        counts[planned] = plan.counts
        # nodes no kept task can use: exploring tasks, then the others, up to their caps
        left = sim.config.num_nodes - int(counts.sum())
        for tasks in (exploring, planned[~plan.kept]):
            share = counts[tasks]
            left = spread(share, wl.cap[tasks], left)
            counts[tasks] = share
        return counts, plan
