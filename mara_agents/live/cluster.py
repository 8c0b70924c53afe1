"""The live backend: the cluster interface over real training jobs.

:class:`LiveCluster` is a :class:`mara_env.cluster.ClusterState`, so every scheduler, a
user's own, and the shipped policy (through the env's ``backend=``) drive it unchanged.
What differs from the simulator is :meth:`LiveCluster._serve`: a tick runs one wall-clock
slice of every job that has nodes, on a *pool* of workers
(:class:`mara_agents.live.pool.RayPool`), and the work and loss a job reports are its real
optimisation steps and its real held-out loss.

A job evaluates as a real job does (:mod:`mara_agents.live.worker`): every ``eval_every``
steps, stopping at the first evaluation at or below its target.  Such a slice sets
``passed`` and the job completes in that tick; ``reported`` is its last evaluation, and
``evals`` keeps every evaluation of every job (``curves.csv``).

The throughput model (``rate``, ``alpha`` of ``steps per tick = rate * n**alpha``) is not
given: each job is probed on one node before the run (its loss before training and its
one-node speed, the prior of its ``rate``), then fitted to the steps of every slice whose
workers did not change (:class:`mara_env.throughput.ThroughputModel`).  A slice after a
change of workers restores every worker from the job's checkpoint inside the slice: its
steps show the real cost of a re-assignment and are left out of the fit.

A slice whose worker died (killed, lost) is *lost*: the job made no progress that tick and
restarts from its last checkpoint on its next slice.  A job whose own code raises is
*failed*: it leaves the cluster with its error, and the others go on.  Every tick is
journalled (:mod:`mara_agents.live.journal`) after its checkpoints are saved, so a killed
driver resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from mara_agents.live.jobfile import JobFile
from mara_agents.live.journal import Journal
from mara_env.cluster import ACTIVE, DONE, EXPIRED, ClusterState
from mara_env.config import ClusterConfig
from mara_env.throughput import ThroughputModel
from mara_env.workload import Workload

LOST_LIMIT = 3  # a job whose slices are lost this many ticks in a row is marked failed


@dataclass(frozen=True)
class Slice:
    """One job's share of a tick: its spec, its workers (node indices, rank order)."""

    task: int
    spec: dict[str, Any]
    nodes: tuple[int, ...]
    generation: int  # changes whenever the job's set of workers changes
    fresh: bool  # the first slice of this generation: workers rebuild and regroup
    state: bytes | None  # the job's last checkpoint (None: start from its seed)


class Pool(Protocol):
    """Workers that run slices: one per node."""

    def probe(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per job: ``loss0``, ``steps_per_s`` on one node, ``family``."""

    def run(self, slices: list[Slice], seconds: float) -> dict[int, dict[str, Any]]:
        """Per task: ``status`` (``ok``/``lost``/``failed``) and, when ok, rank 0's report
        (``steps``, ``slice_steps``, ``evals``, ``passed``, ``state``, ``setup_s``...)."""


class LiveCluster(ClusterState):
    """Real jobs of a job file on ``num_nodes`` workers of ``pool``, one slice a tick."""

    def __init__(
        self,
        jobs: JobFile,
        pool: Pool,
        num_nodes: int,
        tick_seconds: float,
        journal: Journal | None = None,
        on_tick: Callable[[LiveCluster], None] | None = None,
    ) -> None:
        self.config = ClusterConfig(
            num_nodes=num_nodes, horizon=1 + max(j.arrival for j in jobs.jobs)
        )
        self.jobs = jobs
        self.pool = pool
        self.tick_seconds = float(tick_seconds)
        self.journal = journal
        self.on_tick = on_tick
        self.record = True  # a live run always keeps its allocation (the Gantt)
        self.traces = None
        self.diverged = False  # a resumed scheduler decided otherwise than the journal says
        self._probes: list[dict[str, Any]] | None = None
        self._replay: list[dict[str, Any]] = []

    # ---- lifecycle ----------------------------------------------------------------
    def reset(
        self, rng: np.random.Generator | None = None, workload: Workload | None = None
    ) -> None:
        """Probe every job (or take the probes of a resumed journal) and start the run."""
        if workload is not None:
            raise ValueError("a live cluster's tasks come from its job file, not a workload")
        jobs = self.jobs.jobs
        if self._probes is None:
            self._probes = self.pool.probe([j.spec() for j in jobs])
        probes = self._probes
        families = sorted({p["family"] for p in probes})
        self._family = np.array([p["family"] for p in probes])
        n = len(jobs)
        rate_prior = np.array([p["steps_per_s"] * self.tick_seconds for p in probes])
        measured = np.isfinite(rate_prior) & (rate_prior > 0)
        # a job whose probe raised never runs; its prior only has to be a valid number
        fill = float(np.median(rate_prior[measured])) if measured.any() else 1.0
        self.throughput = ThroughputModel(
            np.searchsorted(families, self._family),
            alpha_prior=float(np.mean(self.config.alpha_range)),
            rate_prior=np.where(measured, rate_prior, fill),
        )
        rate, alpha = self.throughput.rates()
        unknown = np.full(n, np.nan)
        workload = Workload(
            arrival=np.array([j.arrival for j in jobs], np.int64),
            deadline=np.array([j.deadline for j in jobs], np.int64),
            target=np.array([j.target for j in jobs]),
            trace=np.arange(n),
            cap=np.array([j.cap for j in jobs], np.int64),
            alpha=alpha,
            rate=rate,
            size=unknown,
            work_sampled=unknown,
            work_true=unknown,  # nobody knows a real job's work in advance
            ref=np.array([j.gpus for j in jobs], np.int64),
        )
        self._members: list[tuple[int, ...]] = [()] * n
        self._generation = np.zeros(n, np.int64)
        # a resumed run's workers are new: every job regroups on its first live slice
        self._broken = np.full(n, bool(self._replay))
        self._lost_streak = np.zeros(n, np.int64)
        self._state: list[bytes | None] = [None] * n
        self._state_path: list[str | None] = [None] * n
        self.failed = {k: p["error"] for k, p in enumerate(probes) if p.get("error")}
        self.slices: list[dict[str, Any]] = []
        # every evaluation of each job, [step, loss], from its loss before training on
        self.evals: list[list[list[float]]] = [[[0, p["loss0"]]] for p in probes]
        self._start(workload, np.array([p["loss0"] for p in probes]))

    def resume(self, probes: list[dict[str, Any]], ticks: list[dict[str, Any]]) -> None:
        """Continue a journalled run: the next :meth:`reset` takes ``probes`` and the next
        ``len(ticks)`` ticks take their reports from the journal instead of the pool."""
        self._probes = probes
        self._replay = list(ticks)

    def task_families(self) -> np.ndarray:
        return self._family

    # ---- one tick -----------------------------------------------------------------
    def tick(self, assign: np.ndarray):
        replaying = bool(self._replay) and self._replay[0]["t"] == self.t
        if replaying:
            journalled = np.asarray(self._replay[0]["assign"], np.int64)
            if not np.array_equal(journalled, np.asarray(assign)):
                self.diverged = True  # the journal's decision is what happened: apply it
            assign = journalled
        result = super().tick(assign)
        for k in list(self.failed):
            if self.status[k] == ACTIVE:  # leaves now, with its error
                self.status[k] = EXPIRED
                self.finish_tick[k] = self.t
                self.nodes_now[k] = 0
                self.node_task[self.node_task == k] = -1
        if self.on_tick is not None:
            self.on_tick(self)
        return result

    def _serve(self, assign: np.ndarray, total: np.ndarray, warm: np.ndarray) -> np.ndarray:
        t = self.t
        if self._replay and self._replay[0]["t"] == t:
            record = self._replay.pop(0)
            outcomes = {int(k): v for k, v in record["outcomes"].items()}
            for k, v in outcomes.items():
                self._members[k] = tuple(np.flatnonzero(assign == k).tolist())
                if v.get("checkpoint"):
                    self._state_path[k] = v["checkpoint"]
                    self._state[k] = None  # read from the checkpoint store when needed
            self._note_slices(assign, outcomes, t)
            return self._apply(outcomes)
        slices = []
        for k in np.flatnonzero(total).tolist():
            if k in self.failed:  # its probe raised: no slice for it, it leaves this tick
                continue
            nodes = tuple(np.flatnonzero(assign == k).tolist())
            fresh = nodes != self._members[k] or bool(self._broken[k])
            if fresh:
                self._generation[k] += 1
                self._members[k], self._broken[k] = nodes, False
            slices.append(
                Slice(
                    task=k,
                    spec=self.jobs.jobs[k].spec(),
                    nodes=nodes,
                    generation=int(self._generation[k]),
                    fresh=fresh,
                    state=self._checkpoint(k),
                )
            )
        outcomes = self.pool.run(slices, self.tick_seconds) if slices else {}
        for s in slices:
            outcomes[s.task]["fresh"] = s.fresh
        if self.journal is not None:
            for k, v in outcomes.items():
                if v["status"] == "ok":
                    path = self.journal.save_checkpoint(self.jobs.jobs[k].name, t, v["state"])
                    v["checkpoint"] = path
        for k, v in outcomes.items():
            if v["status"] == "ok":
                self._state[k] = v.pop("state")
                self._state_path[k] = v.get("checkpoint")
        self._note_slices(assign, outcomes, t)
        progressed = self._apply(outcomes)
        if self.journal is not None:
            plain = {str(k): v for k, v in outcomes.items()}
            self.journal.tick({"t": t, "assign": assign.tolist(), "outcomes": plain})
            for k, v in outcomes.items():
                if v.get("checkpoint"):
                    self.journal.prune(self.jobs.jobs[k].name, v["checkpoint"])
        return progressed

    def _checkpoint(self, k: int) -> bytes | None:
        if self._state[k] is None and self._state_path[k] is not None:
            self._state[k] = self.journal.load_checkpoint(self._state_path[k])
        return self._state[k]

    def _apply(self, outcomes: dict[int, dict[str, Any]]) -> np.ndarray:
        """Take the tick's reports: new work and losses, the throughput fit, lost and
        failed slices; returns the tasks that progressed."""
        progressed, steady, gains = [], [], []
        for k, v in sorted(outcomes.items()):
            if v["status"] == "ok":
                self._lost_streak[k] = 0
                progressed.append(k)
                self.work[k] = float(v["steps"])
                evals = v.get("evals", [])
                self.evals[k] += evals
                if evals:  # a slice shorter than eval_every steps reports nothing new
                    self.reported[k] = float(evals[-1][1])
                self.passed[k] = bool(v.get("passed", False))
                if not v.get("fresh", True):
                    steady.append(k)
                    gains.append(float(v["slice_steps"]))
            elif v["status"] == "lost":
                self._broken[k] = True
                self._lost_streak[k] += 1
                if self._lost_streak[k] >= LOST_LIMIT:
                    self.failed[k] = f"{LOST_LIMIT} slices in a row lost: {v.get('error', '')}"
            else:
                self.failed[k] = v.get("error", "failed")
        if steady:
            steady_arr = np.array(steady)
            nodes = np.array([len(self._members[k]) for k in steady])
            self.throughput.observe(steady_arr, nodes, np.array(gains))
            self.workload.rate[:], self.workload.alpha[:] = self.throughput.rates()
        return np.array(progressed, np.int64)

    def _note_slices(self, assign: np.ndarray, outcomes: dict[int, dict[str, Any]], t: int) -> None:
        for k, v in sorted(outcomes.items()):
            mine = assign == k
            evals = v.get("evals") or []
            self.slices.append(
                {
                    "tick": t,
                    "job": self.jobs.jobs[k].name,
                    "nodes": int(mine.sum()),
                    # nodes that did not serve the job in the last tick (node_task is still
                    # the last tick's here): the simulator's re-assignments
                    "joined": int((mine & (self.node_task != k)).sum()),
                    "status": v["status"],
                    "fresh": bool(v.get("fresh", False)),
                    # whether rank 0's worker built the job this slice (a staying one keeps it)
                    "built": bool(v.get("built", False)),
                    "steps": v.get("steps", np.nan),
                    "slice_steps": v.get("slice_steps", np.nan),
                    "evals": len(evals),
                    "loss": evals[-1][1] if evals else np.nan,
                    "passed": bool(v.get("passed", False)),
                    "setup_s": v.get("setup_s", np.nan),
                    "train_s": v.get("train_s", np.nan),
                    "eval_s": v.get("eval_s", np.nan),
                    "step_estimate_s": v.get("step_estimate_s", np.nan),
                    "error": v.get("error", ""),
                }
            )

    def tick_summary(self) -> dict[str, Any]:
        """What the progress line shows after a tick."""
        return {
            "tick": self.t,
            "active": int((self.status == ACTIVE).sum()),
            "done": int((self.status == DONE).sum()),
            "expired": int((self.status == EXPIRED).sum()) - len(self.failed),
            "failed": len(self.failed),
            "busy": int((self.node_task >= 0).sum()),
        }
