"""lookahead: hedge's plan against a few alternatives, each rolled forward with hedge.

A rollout planner (Bertsekas & Castañón 1999) with :mod:`~mara_agents.baselines.hedge` as
its base policy: a teacher, not a scheduler to run online (it costs a few hundred times
hedge's planning per tick).  Each tick:

1. **Hedge's plan** on the active tasks in deadline order, from the same remaining-work
   distribution hedge plans with (``predictor``: by default hedge's, the calibrated
   remaining-work model ``task``; ``task-no-flow``, the flow model fused with the deadline
   prior, or the prior alone; ``exact``, a reference no scheduler can run: each task's
   exact remaining work, so every world is the true one but for arrivals).
2. **Candidates.** Hedge itself and up to ``candidates - 1`` alternatives, each hedge with
   one change it keeps for the whole rollout: a kept task dropped (it gets only the nodes
   the others leave idle; the least likely to finish first), or a task hedge does not
   keep admitted at the cheapest count of its best chance (the others share the rest; the
   most likely first), taken in turn.
3. **Futures.** ``futures`` worlds, common to every candidate: each present task's
   remaining work drawn from its distribution (stratified across the worlds), and, with
   ``arrivals="seen"``, arrivals within the horizon: Poisson at the rate of the arrivals
   of the last :data:`RATE_WINDOW` ticks, each a copy of a task seen so far in this
   episode (cap, throughput, time allowed to its deadline) whose work is drawn from the
   deadline prior for that time allowed, and whose distribution is that prior's.
4. **Rollouts.** Each candidate plays each world for ``horizon`` ticks under the
   simulator's tick rule (warm-up, ``rate * n**alpha``, completion and expiry:
   :mod:`mara_env.cluster`'s functions), hedge re-planning every tick on the distribution
   conditioned on the work done (``rollout_quantiles`` quantiles of the samples still
   above it).  A candidate's value is its completions in the horizon plus the present
   tasks whose sampled work the nodes they hold then would finish by their deadlines.
5. **This tick:** the first counts of the candidate with the most value on average over
   the worlds, where it is ahead of hedge's by more than ``margin`` standard errors of
   the paired difference over the worlds (otherwise, and on ties, hedge's).  Hedge's plan
   is always a candidate, so in its own model the choice is never worse than hedge's.

**Knows** what hedge knows (the tasks present, their caps, deadlines, throughput model and
loss reports, and the deadline prior fitted on the train split), and the arrivals of this
episode so far.  It never reads a task's true work or the workload's future.  **Assumes**
what hedge assumes, and that arrivals continue as in the last ticks (``predictor=exact``:
it reads each present task's true remaining work, as ``hedge:predictor=exact`` does);
rollouts have no throughput noise and no flow-model refresh (conditioning stands in for
new reports).
With ``candidates=1`` it is hedge.  Its knobs (``candidates``, ``horizon``, ``futures``,
``rollout_quantiles``, ``margin``, ``arrivals``) were chosen on the validation split only
(``docs/baselines.md``); hedge's (``predictor``, ``prior`` and the knobs of
:class:`~mara_agents.planning.hedge_rule.HedgeParams`) pass through to it.
"""

from __future__ import annotations

import numpy as np

from mara_agents.baselines.hedge import DEFAULT_PREDICTOR, Hedge
from mara_agents.planning.history import CLUSTER, ClusterHistory
from mara_agents.planning.lookahead_rule import (
    Candidate,
    Futures,
    LookaheadParams,
    alternatives,
    candidate_counts,
    choose,
    rollout_values,
)
from mara_agents.planning.predictors import EXACT, check_predictor
from mara_env.cluster import PENDING, ClusterSim
from mara_env.schedulers import Scheduler, edf_order

# hedge's predictors that speak for every task from its arrival on (a rollout samples
# them), and exact work (a reference: every world is the true one)
PREDICTORS = (CLUSTER, "flow+deadline", "deadline", "task", "task-no-flow", EXACT)
ARRIVALS = ("none", "seen")
# ticks of recent arrivals whose rate the rollouts' arrivals follow
RATE_WINDOW = 24


class Lookahead(Scheduler):
    """The lookahead teacher (this module's docstring) as a scheduler.

    ``candidates``, ``horizon``, ``futures``, ``rollout_quantiles``: see
    :class:`~mara_agents.planning.lookahead_rule.LookaheadParams` (None: its default);
    ``arrivals``: ``"none"`` (default: rollouts without arrivals) or ``"seen"``.
    ``predictor`` and ``hedge`` (``prior`` and the knobs of
    :class:`~mara_agents.planning.hedge_rule.HedgeParams`) are its hedge's
    (:class:`~mara_agents.baselines.hedge.Hedge`).
    """

    name = "lookahead"

    def __init__(
        self,
        candidates: int | None = None,
        horizon: int | None = None,
        futures: int | None = None,
        rollout_quantiles: int | None = None,
        margin: float | None = None,
        arrivals: str = "none",
        predictor: str = DEFAULT_PREDICTOR,
        **hedge: float | str,
    ) -> None:
        check_predictor("lookahead", predictor, PREDICTORS)
        if arrivals not in ARRIVALS:
            raise ValueError(
                f"lookahead: arrivals={arrivals!r}; expected one of {', '.join(ARRIVALS)}"
            )
        given = {
            "candidates": candidates,
            "horizon": horizon,
            "futures": futures,
            "rollout_quantiles": rollout_quantiles,
            "margin": margin,
        }
        if arrivals == "seen" and predictor == EXACT:
            raise ValueError(
                "lookahead: arrivals='seen' draws arrivals' work from the deadline prior; "
                f"predictor={EXACT!r} has none (expected arrivals='none')"
            )
        self.params = LookaheadParams(**{k: v for k, v in given.items() if v is not None})
        self.arrivals = arrivals
        self.hedge = Hedge(predictor=predictor, **hedge)

    @property
    def reads_history(self) -> bool:
        """Whether its episodes read the cluster's history (through its hedge)."""
        return self.hedge.reads_history

    @property
    def needs_tuning(self) -> bool:
        """Whether its hedge plans with the cluster's tuning (price of a miss, distribution)."""
        return self.hedge.needs_tuning

    def use_history(self, history: ClusterHistory) -> None:
        """Plan with ``history`` from the next episode on (:meth:`Hedge.use_history`)."""
        self.hedge.use_history(history)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.hedge.reset(sim, rng)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        rw = self.hedge.predictions(sim, order)
        counts, plan = self.hedge.plan(sim, order, rw)
        wl = sim.workload
        cap = wl.cap[order]
        others = alternatives(Candidate(), plan, cap, self.params.candidates - 1)
        if not others:
            return counts
        unknown = rw.fallback | np.isnan(rw.samples).any(axis=1)
        time_left = (wl.deadline[order] - sim.t).astype(np.float64)
        every = np.arange(len(order))
        candidates = [Candidate(), *others]
        first = np.array(
            [counts[order]]
            + [
                candidate_counts(
                    cand,
                    every,
                    rw.samples,
                    unknown,
                    time_left,
                    cap,
                    sim.nodes_now[order],
                    wl.rate[order],
                    wl.alpha[order],
                    sim.config.num_nodes,
                    self.hedge.planned,
                )
                for cand in others
            ]
        )
        values = rollout_values(
            candidates,
            first,
            self._futures(sim, order, np.sort(rw.samples, axis=1)),
            unknown,
            sim.config.num_nodes,
            float(sim.config.reassign_cost),
            self.hedge.planned,
            self.params,
        )
        best = np.zeros(len(sim.status), np.int64)
        best[order] = first[choose(values, self.params.margin)]
        return best

    def _futures(self, sim: ClusterSim, order: np.ndarray, samples: np.ndarray) -> Futures:
        """The worlds of this tick: remaining work of the tasks ``order`` (their ascending
        ``samples``), then arrivals (step 3 of the module docstring)."""
        m, h = self.params.futures, self.params.horizon
        k, s = samples.shape
        rng = self.rng
        wl = sim.workload
        # stratified: each task's worlds take one level from each 1/m of its distribution
        strata = rng.permuted(np.tile(np.arange(m), (k, 1)), axis=1).T
        pick = np.minimum(((strata + rng.random((m, k))) / m * s).astype(np.int64), s - 1)
        current = {
            "samples": np.broadcast_to(samples, (m, k, s)),
            "remaining": samples[np.arange(k)[None, :], pick],
            "start": np.zeros((m, k), np.int64),
            "deadline": np.broadcast_to(wl.deadline[order] - sim.t, (m, k)),
            "cap": np.broadcast_to(wl.cap[order], (m, k)),
            "rate": np.broadcast_to(wl.rate[order], (m, k)),
            "alpha": np.broadcast_to(wl.alpha[order], (m, k)),
            "warm": np.broadcast_to(sim.nodes_now[order], (m, k)),
        }
        seen = np.flatnonzero(sim.status != PENDING)
        recent = (wl.arrival[seen] > sim.t - RATE_WINDOW).sum()
        per_tick = recent / min(RATE_WINDOW, sim.t + 1)
        arrive = rng.poisson(per_tick, (m, h - 1)) if self.arrivals == "seen" else np.zeros((m, 0))
        a = int(arrive.sum(axis=1).max(initial=0))
        if a == 0:
            return Futures(**{key: np.ascontiguousarray(v) for key, v in current.items()})
        # each world's arrivals (ticks 1 .. h-1), padded to a with tasks that never come
        start = np.full((m, a), h + 1, np.int64)
        for w in range(m):
            ticks = np.repeat(np.arange(1, h), arrive[w])
            start[w, : len(ticks)] = ticks
        from flow_predictor.deadline_prior import deadline_scale

        like = seen[rng.integers(len(seen), size=(m, a))]
        allowed = wl.deadline[like] - wl.arrival[like]
        ratios = self.hedge.prior.ratios_of(allowed.ravel())
        levels = ((np.arange(s) + 0.5) / s * ratios.shape[1]).astype(np.int64)
        scale = deadline_scale(wl, sim.config, like.ravel())[:, None]
        new = (scale * np.exp(ratios[:, levels])).reshape(m, a, s)
        pick = rng.integers(s, size=(m, a))
        extra = {
            "samples": new,
            "remaining": np.where(
                start <= h, np.take_along_axis(new, pick[..., None], axis=2)[..., 0], np.inf
            ),
            "start": start,
            "deadline": start + allowed,
            "cap": wl.cap[like],
            "rate": wl.rate[like],
            "alpha": wl.alpha[like],
            "warm": np.zeros((m, a), np.int64),
        }
        return Futures(
            **{key: np.concatenate([current[key], extra[key]], axis=1) for key in current}
        )
