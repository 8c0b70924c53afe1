"""The lookahead rule: hedge's plan against a few alternatives, each rolled forward with hedge.

The arithmetic of :mod:`mara_agents.baselines.lookahead` (its docstring is the
specification) on arrays, with no simulation object, beside its knobs
(:class:`LookaheadParams`).  A *candidate* is hedge with one change that it keeps for the
whole rollout: nothing (hedge itself), a task dropped, or a task admitted at a fixed
count.  Each candidate plays the same ``futures`` sampled worlds (a remaining work for
every task, and arrivals) for ``horizon`` ticks under the simulator's tick rule
(:func:`~mara_env.cluster.working_nodes`, :func:`~mara_env.cluster.work_gain`,
:func:`~mara_env.cluster.tick_ends`), hedge (:func:`~mara_agents.planning.hedge_rule.plan_counts`)
re-planning every tick on the distribution conditioned on the work done.  Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mara_agents.planning.hedge_rule import HedgeParams, HedgePlan, plan_counts
from mara_env.cluster import tick_ends, work_gain, working_nodes
from mara_env.schedulers import spread, ticks_needed

# The largest knob values: the cost per tick grows as candidates x futures x horizon.
MAX_CANDIDATES = 64
MAX_HORIZON = 256
MAX_FUTURES = 256
MAX_QUANTILES = 4096


@dataclass(frozen=True)
class LookaheadParams:
    """The lookahead's knobs, with the defaults chosen on the validation split; each is
    checked against its range here (a spec's error names the knob and the range)."""

    candidates: int = 3  # K: hedge's plan and up to K - 1 alternatives
    horizon: int = 8  # H: ticks each rollout plays
    futures: int = 8  # M: sampled worlds, common to every candidate
    rollout_quantiles: int = 32  # of the conditioned distribution hedge plans on in a rollout
    margin: float = 2.0  # standard errors by which an alternative must beat the base

    def __post_init__(self) -> None:
        limits = {
            "candidates": MAX_CANDIDATES,
            "horizon": MAX_HORIZON,
            "futures": MAX_FUTURES,
            "rollout_quantiles": MAX_QUANTILES,
        }
        for key, top in limits.items():
            value = getattr(self, key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not float(value).is_integer() or not 1 <= value <= top:
                raise ValueError(
                    f"lookahead: {key}={value!r}; expected a whole number in [1, {top}]"
                )
            object.__setattr__(self, key, int(value))
        value = self.margin
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            raise ValueError(f"lookahead: margin={value!r}; expected a number in [0, 100]")
        object.__setattr__(self, "margin", float(value))


@dataclass(frozen=True)
class Candidate:
    """Hedge with changes kept for the whole rollout (indices into the current tasks):
    tasks ``drop``ped get only the nodes the others leave idle; tasks ``admit``ted hold
    their count (fewer only at their cap) while the others share the rest."""

    drop: tuple[int, ...] = ()
    admit: tuple[tuple[int, int], ...] = ()  # (task, count)

    def dropping(self, task: int) -> Candidate:
        """This candidate with ``task`` dropped too."""
        return Candidate((*self.drop, task), self.admit)

    def admitting(self, task: int, count: int) -> Candidate:
        """This candidate with ``task`` admitted at ``count`` too."""
        return Candidate(self.drop, (*self.admit, (task, count)))

    def changes(self) -> set[int]:
        """The tasks it treats otherwise than hedge."""
        return {*self.drop, *(j for j, _ in self.admit)}


@dataclass
class Futures:
    """The worlds every candidate plays (``M`` worlds, ``n`` tasks: the current ones,
    then arrivals).  Ticks count from now; a task is present from ``start`` on (0: now)."""

    samples: np.ndarray  # (M, n, S) ascending: the remaining work the planner believes
    remaining: np.ndarray  # (M, n): the world's remaining work (one of the samples)
    start: np.ndarray  # (M, n) int: the tick it arrives (beyond the horizon: never)
    deadline: np.ndarray  # (M, n): ticks from now to its deadline
    cap: np.ndarray  # (M, n) int
    rate: np.ndarray  # (M, n)
    alpha: np.ndarray  # (M, n)
    warm: np.ndarray  # (M, n) int: nodes that served it in the last tick (0: arrivals)


def alternatives(base: Candidate, plan: HedgePlan, cap: np.ndarray, limit: int) -> list[Candidate]:
    """Up to ``limit`` alternatives to ``base`` (hedge with the changes made so far), one
    change more each, ranked by hedge's ``plan`` (tasks in deadline order): dropping a kept
    task (the least likely to finish first) and admitting a task that is not kept (the most
    likely first, at the cheapest count of its best chance), taken in turn."""
    chance = plan.chance
    held = chance[np.arange(len(plan.counts)), np.minimum(plan.counts, chance.shape[1] - 1)]
    best = chance.max(axis=1)
    free = np.ones(len(plan.counts), bool)
    free[list(base.changes())] = False
    kept = np.flatnonzero(plan.kept & free)
    out = np.flatnonzero(~plan.kept & free & (best > 0))
    drops = [base.dropping(int(i)) for i in kept[np.argsort(held[kept], kind="stable")]]
    admits = [
        base.admitting(int(j), int(np.argmax(chance[j, : cap[j] + 1])))
        for j in out[np.argsort(-best[out], kind="stable")]
    ]
    mixed = [c for pair in zip(drops, admits) for c in pair]
    rest = drops[len(admits) :] + admits[len(drops) :]
    return (mixed + rest)[:limit]


def candidate_counts(
    candidate: Candidate,
    tasks: np.ndarray,
    samples: np.ndarray,
    unknown: np.ndarray,
    time_left: np.ndarray,
    cap: np.ndarray,
    warm: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    num_nodes: int,
    hedge: HedgeParams,
) -> np.ndarray:
    """Nodes per task of ``candidate`` for present tasks ``tasks`` (their indices, deadline
    order; the other arrays aligned with them): hedge
    (:func:`~mara_agents.planning.hedge_rule.plan_counts`) on the tasks it plans, an
    admitted task's count first, a dropped task the nodes left over up to its cap."""
    counts = np.zeros(len(tasks), np.int64)
    for j, count in candidate.admit:
        counts[tasks == j] = np.minimum(count, cap[tasks == j])
    dropped = np.isin(tasks, candidate.drop)
    planned = ~dropped & ~np.isin(tasks, [j for j, _ in candidate.admit])
    nodes = num_nodes - int(counts.sum())
    counts[planned] = plan_counts(
        samples[planned],
        unknown[planned],
        time_left[planned],
        cap[planned],
        warm[planned],
        rate[planned],
        alpha[planned],
        nodes,
        hedge,
    )[0]
    got = counts[dropped]
    spread(got, cap[dropped], num_nodes - int(counts.sum()))
    counts[dropped] = got
    return counts


def conditioned(samples: np.ndarray, done: np.ndarray, quantiles: int) -> np.ndarray:
    """``quantiles`` evenly spaced quantiles of each row's remaining work after ``done``
    more: the ascending ``samples`` above ``done``, less ``done``."""
    s = samples.shape[1]
    above = np.maximum((samples > done[:, None]).sum(axis=1), 1)
    levels = (np.arange(quantiles) + 0.5) / quantiles
    idx = np.minimum(
        s - above[:, None] + (levels[None, :] * above[:, None]).astype(np.int64), s - 1
    )
    left = np.take_along_axis(samples, idx, axis=1) - done[:, None]
    return np.maximum(left, 1e-9)


def rollout_values(
    candidates: list[Candidate],
    first: np.ndarray,
    futures: Futures,
    unknown: np.ndarray,
    num_nodes: int,
    reassign_cost: float,
    hedge: HedgeParams,
    params: LookaheadParams,
) -> np.ndarray:
    """Completions each candidate (rows) reaches in each world (columns) within the
    horizon, plus the tasks still present then that their sampled work lets finish by
    their deadline on the nodes they hold.  ``first``: each candidate's counts this tick
    (candidates x current tasks, planned on the full distribution)."""
    c, (m, n) = len(candidates), futures.remaining.shape
    k = first.shape[1]
    f = futures
    unknown = np.concatenate([unknown, np.zeros(n - k, bool)])
    order = np.lexsort((np.broadcast_to(np.arange(n), (m, n)), f.start, f.deadline), axis=-1)
    present = np.broadcast_to(f.start == 0, (c, m, n)).copy()
    done = np.zeros((c, m, n))
    nodes_now = np.broadcast_to(f.warm, (c, m, n)).copy()
    value = np.zeros((c, m))
    counts = np.zeros((c, m, n), np.int64)
    counts[:, :, :k] = first[:, None, :]
    for t in range(params.horizon):
        if t > 0:
            counts[:] = 0
            plans: dict[bytes, np.ndarray] = {}
            for i, cand in enumerate(candidates):
                for w in range(m):
                    tasks = order[w][present[i, w, order[w]]]
                    arrived = (tasks >= k).any()
                    key = b"".join(
                        (
                            bytes([i]),
                            np.int64(w if arrived else -1).tobytes(),
                            present[i, w].tobytes(),
                            nodes_now[i, w].tobytes(),
                            done[i, w].tobytes(),
                        )
                    )
                    if key not in plans:
                        plans[key] = candidate_counts(
                            cand,
                            tasks,
                            conditioned(
                                f.samples[w, tasks], done[i, w, tasks], params.rollout_quantiles
                            ),
                            unknown[tasks],
                            (f.deadline[w, tasks] - t).astype(np.float64),
                            f.cap[w, tasks],
                            nodes_now[i, w, tasks],
                            f.rate[w, tasks],
                            f.alpha[w, tasks],
                            num_nodes,
                            hedge,
                        )
                    counts[i, w, tasks] = plans[key]
        working = working_nodes(counts, np.minimum(counts, nodes_now), reassign_cost)
        progressed = working > 0
        done += np.where(progressed, work_gain(f.rate, f.alpha, working), 0.0)
        reached = progressed & (done >= f.remaining)
        completed, expired = tick_ends(t + 1, f.deadline, reached, present)
        value += completed.sum(axis=2)
        present &= ~(completed | expired)
        nodes_now = np.where(present, counts, 0)
        present |= f.start == t + 1
    held = np.where(present, nodes_now, 0).astype(np.float64)
    need = ticks_needed(f.remaining - done, held, held, f.rate, f.alpha)
    with np.errstate(invalid="ignore"):
        value += (present & (need <= f.deadline - params.horizon)).sum(axis=2)
    return value


def choose(values: np.ndarray, margin: float) -> int:
    """The candidate (rows) with the most completions on average over the worlds (columns)
    among the base (row 0) and those ahead of it by more than ``margin`` standard errors of
    the paired difference (ties: the first)."""
    gain = values - values[0]
    mean = gain.mean(axis=1)
    se = gain.std(axis=1, ddof=1) / np.sqrt(values.shape[1]) if values.shape[1] > 1 else 0.0
    ahead = mean > margin * se
    ahead[0] = True
    return int(np.argmax(np.where(ahead, mean, -np.inf)))
