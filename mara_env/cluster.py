"""Cluster simulator: discrete nodes serving learning tasks, one tick at a time.

Pure numpy, seeded, no I/O.  A scheduler (or the PettingZoo env) hands
:meth:`ClusterSim.tick` one task index per node (``-1`` = idle); the simulator applies
the re-assignment cost, the sub-linear speed-up and the parallelism caps, advances
work, reports losses from the real traces, and retires completed and expired tasks.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from mara_env.config import ClusterConfig
from mara_env.throughput import ThroughputModel
from mara_env.traces import LOSS_FLOOR, TraceSet
from mara_env.workload import Workload, sample_workload

PENDING, ACTIVE, DONE, EXPIRED = 0, 1, 2, 3


def working_nodes(total: np.ndarray, stayed: np.ndarray, reassign_cost: float) -> np.ndarray:
    """Nodes' worth of work each task gets in a tick on ``total`` nodes, ``stayed`` of
    which served it in the last tick: a joining node loses ``reassign_cost`` of its first
    tick (a share in [0, 1]; between 0 and 1 the counts become floats)."""
    if 0.0 < reassign_cost < 1.0:
        return stayed + (1.0 - reassign_cost) * (total - stayed)
    return total if reassign_cost == 0.0 else stayed


def work_gain(rate: np.ndarray, alpha: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Work a tick gives a task on ``nodes`` working nodes: ``rate * nodes**alpha``."""
    return rate * nodes**alpha


def tick_ends(
    t: int | np.ndarray, deadline: np.ndarray, reached: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which tasks leave after a tick that ends at ``t`` (arrays broadcast): (completed,
    expired).  A task whose work ``reached`` what it needs in this tick completes if the
    tick ends by its deadline; any other ``active`` task expires once ``t`` reaches it."""
    completed = reached & (t <= deadline)
    return completed, active & ~completed & (t >= deadline)


class InvalidAssignment(ValueError):
    """An assignment names an inactive task or exceeds a task's parallelism cap."""


@dataclass
class TickResult:
    """What one tick changed."""

    completed: np.ndarray
    expired: np.ndarray
    arrived: np.ndarray
    reported: np.ndarray  # tasks that reported a new loss this tick


@dataclass
class EpisodeStats:
    """Running per-episode metrics (see ``metrics()`` for the reported dict)."""

    node_ticks_busy: int = 0
    node_ticks_total: int = 0
    warmup_node_ticks: int = 0
    reassignments: int = 0


class ClusterState:
    """The cluster interface: what every backend keeps and every scheduler reads.

    Schedulers, the env and the policy read only these, so they run unchanged on the
    simulator (:class:`ClusterSim`) and on a live cluster
    (:class:`mara_agents.live.cluster.LiveCluster`):

    * ``config`` (``num_nodes`` is the nodes now), ``t`` (ticks so far), ``done``;
    * ``workload``: per task ``arrival``, ``deadline``, ``target``, ``cap`` and the
      throughput model ``rate``, ``alpha`` (work per tick on ``n`` nodes = ``rate * n**alpha``);
      in a simulator with ``throughput="known"`` these are the truth, otherwise estimates
      from what the tasks did so far (:class:`mara_env.throughput.ThroughputModel`);
    * per task ``status``, ``work`` (done so far), ``reported`` (its last loss report),
      ``slope``, ``nodes_now`` (nodes that served it in the last tick), :meth:`history`,
      :meth:`progress`; per node ``node_task``; :meth:`active`, :meth:`potential`.

    **Completion** is what a job sees: a job evaluates its loss at its own points (a
    trace's logged points; in live mode every ``eval_every`` steps) and stops at the first
    evaluation at or below its target.  So a task completes in the tick in which its
    training *passes* such an evaluation (``passed``), if that tick ends by its deadline;
    the loss it reports at the end of the tick (``reported``, for observations) is the
    last evaluation at or below its work, which may lie above the target again.  Under a
    fixed allocation more nodes never complete a task later.

    A backend implements :meth:`_serve`: it advances ``work``, ``reported`` and
    ``passed`` for the tasks that made progress in a tick.  Everything else, the caps, the
    warm-up accounting, completion, expiry, arrivals and the metrics, is this class's,
    once for every backend.  :meth:`remaining_true` exists only where the backend knows
    the truth.
    """

    config: ClusterConfig
    workload: Workload
    record: bool = False

    # ---- episode lifecycle -------------------------------------------------------
    def _start(self, workload: Workload, loss0: np.ndarray) -> None:
        """Begin an episode of ``workload``; ``loss0``: each task's loss before training."""
        self.workload = workload
        n = len(workload)
        self.t = 0
        self.status = np.zeros(n, np.int8)
        self.work = np.zeros(n)
        self.loss0 = np.asarray(loss0, np.float64).copy()
        self.reported = self.loss0.copy()
        self.passed = np.zeros(n, bool)  # training passed an evaluation <= its target
        self.nodes_now = np.zeros(n, np.int64)  # nodes that served the task in the last tick
        self.node_task = np.full(self.config.num_nodes, -1, np.int64)
        self.hist_work: list[list[float]] = [[] for _ in range(n)]
        self.hist_loss: list[list[float]] = [[] for _ in range(n)]
        self.slope = np.zeros(n)  # d log loss / d log work over the last reports
        self.finish_tick = np.full(n, -1, np.int64)
        self.node_ticks_used = np.zeros(n, np.int64)
        self.warmup_used = np.zeros(n, np.int64)
        self.stats = EpisodeStats()
        self.assign_log: list[np.ndarray] = []
        self._next_arrival = 0
        self._log_target = np.log(np.maximum(workload.target, LOSS_FLOOR))
        self._log_loss0 = np.log(np.maximum(self.loss0, LOSS_FLOOR))
        self._arrive()

    def _arrive(self) -> np.ndarray:
        wl = self.workload
        start = self._next_arrival
        while self._next_arrival < len(wl) and wl.arrival[self._next_arrival] <= self.t:
            self._next_arrival += 1
        new = np.arange(start, self._next_arrival)
        self.status[new] = ACTIVE
        return new

    @property
    def done(self) -> bool:
        """True once arrivals are over and no task is active."""
        return self._next_arrival >= len(self.workload) and not (self.status == ACTIVE).any()

    def active(self) -> np.ndarray:
        """Indices of active tasks."""
        return np.flatnonzero(self.status == ACTIVE)

    # ---- one scheduling interval -------------------------------------------------
    def check_assignment(self, assign: np.ndarray) -> np.ndarray:
        """Nodes per task under ``assign``; raises :class:`InvalidAssignment` if infeasible."""
        assign = np.asarray(assign)
        n = len(self.status)
        if assign.shape != (self.config.num_nodes,):
            raise InvalidAssignment(
                f"assignment has shape {assign.shape}; expected ({self.config.num_nodes},)"
            )
        busy = assign[assign >= 0]
        inactive = busy >= n
        inactive[~inactive] = self.status[busy[~inactive]] != ACTIVE
        if inactive.any():
            raise InvalidAssignment(f"task {int(busy[inactive][0])} is not active at tick {self.t}")
        counts = np.bincount(busy, minlength=n)
        over = np.flatnonzero(counts > self.workload.cap)
        if len(over):
            k = int(over[0])
            raise InvalidAssignment(
                f"task {k} got {counts[k]} nodes; its parallelism cap is {self.workload.cap[k]}"
            )
        return counts

    def tick(self, assign: np.ndarray) -> TickResult:
        """Serve one interval with node ``i`` on task ``assign[i]`` (-1 idle)."""
        assign = np.asarray(assign, dtype=np.int64)
        total = self.check_assignment(assign)
        if self.record:
            self.assign_log.append(assign.copy())
        wl, n = self.workload, len(self.status)
        busy = assign >= 0
        stay = busy & (assign == self.node_task)
        n_busy, n_joins = int(busy.sum()), int(busy.sum() - stay.sum())
        cost = float(self.config.reassign_cost)  # share of its first tick a joining node loses
        stayed = total if cost == 0.0 else np.bincount(assign[stay], minlength=n)
        warm = working_nodes(total, stayed, cost)
        self.node_ticks_used += total
        self.stats.node_ticks_busy += n_busy
        self.stats.node_ticks_total += self.config.num_nodes
        self.stats.reassignments += n_joins
        if cost > 0.0 and n_joins:
            self.warmup_used += total - stayed
            self.stats.warmup_node_ticks += n_joins

        progressed = self._serve(assign, total, warm)
        for k, w, loss in zip(
            progressed.tolist(),
            self.work[progressed].tolist(),
            self.reported[progressed].tolist(),
        ):
            self.hist_work[k].append(w)
            self.hist_loss[k].append(loss)
            self.slope[k] = _recent_slope(self.hist_work[k], self.hist_loss[k])

        self.t += 1
        self.nodes_now = total
        reached = np.zeros(n, bool)
        reached[progressed] = self.passed[progressed]
        finishing, expiring = tick_ends(self.t, wl.deadline, reached, self.status == ACTIVE)
        completed, expired = np.flatnonzero(finishing), np.flatnonzero(expiring)
        self.status[completed] = DONE
        self.status[expired] = EXPIRED
        gone = np.concatenate([completed, expired])
        self.finish_tick[gone] = self.t
        self.nodes_now[gone] = 0
        still = np.zeros(self.config.num_nodes, bool)
        still[busy] = self.status[assign[busy]] == ACTIVE
        self.node_task = np.where(still, assign, -1)
        arrived = self._arrive()
        return TickResult(
            completed=completed, expired=expired, arrived=arrived, reported=progressed
        )

    def _serve(self, assign: np.ndarray, total: np.ndarray, warm: np.ndarray) -> np.ndarray:
        """Run one interval: node ``i`` on task ``assign[i]``, ``total``/``warm`` nodes per
        task (all / those that served it in the last tick); set ``work``, ``reported`` and
        ``passed`` of the tasks that progressed and return their indices."""
        raise NotImplementedError

    # ---- derived quantities --------------------------------------------------------
    def progress(self, tasks: np.ndarray) -> np.ndarray:
        """Normalised progress in [0, 1]: log(L0/L) / log(L0/eps) (1 = at target)."""
        span = np.maximum(self._log_loss0[tasks] - self._log_target[tasks], 1e-6)
        done = self._log_loss0[tasks] - np.log(np.maximum(self.reported[tasks], LOSS_FLOOR))
        return np.clip(done / span, 0.0, 1.0)

    def potential(self) -> float:
        """Phi: summed normalised progress of active tasks (tasks that left count 0)."""
        act = self.active()
        return float(self.progress(act).sum()) if len(act) else 0.0

    def history(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(work, loss) reports of task ``k`` so far (starting after its first progress)."""
        return np.asarray(self.hist_work[k]), np.asarray(self.hist_loss[k])

    def remaining_true(self, tasks: np.ndarray) -> np.ndarray:
        """Exact work each task still needs to complete (oracle knowledge)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not know tasks' true remaining work "
            "(the oracle runs only on the simulator)"
        )

    def task_families(self) -> np.ndarray:
        """Each task's family (``tabular``, ``vision``, ``lm``, ``rl``, ...)."""
        raise NotImplementedError

    def all_families(self) -> list[str]:
        """The families the metrics count (every family of the library, even if absent)."""
        return sorted(set(self.task_families().tolist()))

    def metrics(self) -> dict[str, float | str]:
        """Per-episode metrics (meaningful once the episode is done).

        Besides the totals, ``tasks_<family>`` and ``completed_<family>`` count the tasks of
        each trace family in the library (0 when an episode has none of that family), and a
        replayed day's episode names its ``day`` (the trace's date).
        """
        n = len(self.status)
        completed = int((self.status == DONE).sum())
        expired = int((self.status == EXPIRED).sum())
        s = self.stats
        lost = self.status == EXPIRED
        expired_ticks = int(self.node_ticks_used[lost].sum())
        wasted = expired_ticks + int(self.warmup_used[~lost].sum())
        return {
            "completion_rate": completed / n if n else float("nan"),
            "tasks": n,
            "completed": completed,
            "expired": expired,
            "utilisation": s.node_ticks_busy / s.node_ticks_total if s.node_ticks_total else 0.0,
            "wasted_node_ticks": wasted,
            "warmup_node_ticks": s.warmup_node_ticks,
            "expired_node_ticks": expired_ticks,
            "reassignments": s.reassignments,
            "ticks": self.t,
            **self._family_counts(),
            **({} if self.workload.day is None else {"day": self.workload.day}),
        }

    def _family_counts(self) -> dict[str, int]:
        task_family = self.task_families()
        out = {}
        for fam in self.all_families():
            mine = task_family == fam
            out[f"tasks_{fam}"] = int(mine.sum())
            out[f"completed_{fam}"] = int((mine & (self.status == DONE)).sum())
        return out


class ClusterSim(ClusterState):
    """The simulator state of one episode; call :meth:`reset` before the first tick.

    Work advances by the task's true ``rate * warm**alpha`` (``warm``: nodes that served
    it in the last tick, or all its nodes without ``reassign_cost``; a fractional
    ``reassign_cost`` lets a joining node do the rest of its first tick), times a
    log-normal factor of mean 1 with ``throughput_noise`` (drawn from the episode's
    generator after the workload), and the reported loss is the task's trace at that work.
    With ``config.throughput == "measured"`` schedulers see ``workload.rate`` and
    ``workload.alpha`` estimated from the work the tasks gained so far, as on a live
    cluster, while the truth (``truth``) drives the simulation.
    """

    def __init__(self, config: ClusterConfig, traces: TraceSet, record: bool = False) -> None:
        self.config = config
        self.traces = traces
        self.record = record  # keep every tick's assignment in ``assign_log``
        # One sorted key over all traces (trace index + step / scale) turns "last
        # logged point at or below this work" into a single vectorised searchsorted.
        lengths = np.diff(traces.offsets)
        self._scale = traces.steps[traces.offsets[1:] - 1] * (1 + 1e-9) + 1e-12
        row_trace = np.repeat(np.arange(len(traces)), lengths)
        self._key = row_trace + traces.steps / self._scale[row_trace]
        self._families = sorted(set(traces.families.tolist()))

    def reset(self, rng: np.random.Generator, workload: Workload | None = None) -> None:
        """Start a new episode with tasks drawn from ``rng`` (or the given workload)."""
        wl = workload if workload is not None else sample_workload(self.config, self.traces, rng)
        self.truth = wl
        self._rng = rng  # the throughput noise's draws, after the workload's
        self.rep_idx = np.zeros(len(wl), np.int64)  # index (within its trace) of the report
        self.estimate: ThroughputModel | None = None
        seen = wl
        if self.config.throughput == "measured":
            group = np.searchsorted(self._families, self.traces.families[wl.trace])
            prior = float(np.mean(self.config.alpha_range))
            self.estimate = ThroughputModel(group, alpha_prior=prior)
            rate, alpha = self.estimate.rates()
            seen = dataclasses.replace(wl, rate=rate, alpha=alpha)
        self._start(seen, self.traces.loss[self.traces.offsets[wl.trace]])

    def _serve(self, assign: np.ndarray, total: np.ndarray, warm: np.ndarray) -> np.ndarray:
        wl = self.truth
        progressed = np.flatnonzero(warm)
        gain = work_gain(wl.rate[progressed], wl.alpha[progressed], warm[progressed])
        cv = self.config.throughput_noise
        if cv > 0 and len(progressed):
            sigma = math.sqrt(math.log1p(cv * cv))  # log-normal with mean 1 and this CV
            gain = gain * np.exp(sigma * self._rng.standard_normal(len(gain)) - sigma**2 / 2)
        self.work[progressed] += gain
        if self.estimate is not None and len(progressed):
            self.estimate.observe(progressed, warm[progressed], gain)
            self.workload.rate[:], self.workload.alpha[:] = self.estimate.rates()
        if len(progressed):
            tr = wl.trace[progressed]
            frac = np.minimum(self.work[progressed] / self._scale[tr], 1 - 1e-12)
            row = np.searchsorted(self._key, tr + frac, side="right") - 1
            row = np.maximum(row, self.traces.offsets[tr])
            self.rep_idx[progressed] = row - self.traces.offsets[tr]
            self.reported[progressed] = self.traces.loss[row]
            self.passed[progressed] = self.work[progressed] >= wl.work_true[progressed]
        return progressed

    def remaining_true(self, tasks: np.ndarray) -> np.ndarray:
        """Exact work each task still needs to complete (oracle knowledge).

        ``work_true - work``: the work to the task's first logged point at or below its
        target (``W_k``), the point at which it completes.  An active task always has a
        positive value (at ``W_k`` it has completed or expired); ``inf`` if its trace never
        reaches the target.  It knows neither the future speed-up nor deadlines' slack.
        """
        return np.maximum(self.truth.work_true[tasks] - self.work[tasks], 0.0)

    def task_families(self) -> np.ndarray:
        return self.traces.families[self.truth.trace]

    def all_families(self) -> list[str]:
        return self._families


def _recent_slope(work: list[float], loss: list[float], lag: int = 4) -> float:
    """d log loss / d log work between the last report and ``lag`` reports earlier."""
    if len(work) < 2:
        return 0.0
    j = max(0, len(work) - 1 - lag)
    if work[j] <= 0 or work[-1] <= work[j]:
        return 0.0
    dl = math.log(max(loss[-1], LOSS_FLOOR)) - math.log(max(loss[j], LOSS_FLOOR))
    return max(-5.0, min(1.0, dl / (math.log(work[-1]) - math.log(work[j]))))
