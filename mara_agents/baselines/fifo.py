"""FIFO with gang allocation and EASY backfill: what Slurm and Kubernetes batch queues do."""

from __future__ import annotations

import numpy as np

from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler
from mara_env.workload import reference_nodes

BACKFILL = ("easy", "any", "none")
# Chosen on the validation split (docs/baselines.md): `python benchmarks/tune_baselines.py
# --scheduler fifo --episodes 50 --workers 2`: "any" 0.556 ± 0.014 (mean completion over
# loads 1 and 2), "easy" 0.543, "none" 0.526.
DEFAULT_BACKFILL = "any"


def requested_nodes(sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
    """Nodes each of ``tasks`` asks for: its reference allocation ``n_ref``.

    The workload sizes tasks on ``n_ref`` nodes (``min(cap, ref_nodes)`` when synthetic, the
    job's GPUs when replayed: ``mara_env.workload.reference_nodes``), so that is what a user
    would request; never more than the cluster has, so every request can run.
    """
    wl, cfg = sim.workload, sim.config
    return np.minimum(reference_nodes(wl, cfg, tasks), cfg.num_nodes)


def shadow(free: int, need: int, release: np.ndarray, nodes: np.ndarray) -> tuple[int, int]:
    """EASY's reservation for a head job needing ``need`` nodes when ``free`` are idle now
    and running jobs hold ``nodes`` until at most ``release``: the tick by which enough
    nodes are surely free, and the nodes to spare at that tick beyond the head's need."""
    order = np.argsort(release, kind="stable")
    free_then = free + np.cumsum(nodes[order])
    i = int(np.searchsorted(free_then, need))  # the first release after which the head fits
    return int(release[order[i]]), int(free_then[i] - need)


class FIFO(Scheduler):
    """FIFO with gang allocation and backfill, as batch queues (Slurm's default
    ``sched/backfill``, Kubernetes batch queues) run jobs; EASY backfill after Lifka, "The
    ANL/IBM SP scheduling system", JSSPP 1995.

    What it does here: every task asks for its reference allocation
    (:func:`requested_nodes`, ``n_ref = min(cap, ref_nodes)``); tasks start in arrival order
    (ties by index), each on exactly its request once that many nodes are idle, and keep
    those nodes, never more, never preempted, until they complete or expire.  When the
    head of the queue does not fit, later tasks may start ahead of it (``backfill``):

    * ``"any"`` (default, chosen on validation): whenever the head's request does not fit
      on the idle nodes, any later task whose request does starts, in arrival order
      (aggressive backfill: it may delay the head; with unknown runtimes no reservation
      time can be computed to rule that out).
    * ``"easy"``: EASY backfill with each task's deadline as its time limit.
      Slurm's backfill plans with the jobs' time limits because runtimes are unknown; here
      the deadline plays that part (a task is killed there: it expires).  The head gets a
      reservation at the *shadow tick*, the first tick by which enough nodes are surely
      free if every running task holds its nodes until its deadline; a later task that fits
      on the idle nodes starts now if its own deadline is no later than the shadow tick or
      it needs no more than the nodes to spare at that tick (which it then uses up).  So a
      backfilled task never delays the head's reservation.
    * ``"none"``: strict FIFO: nothing starts while the head waits.

    Adaptations to our setting: one tick is the scheduling interval (decisions only at
    tick boundaries); nodes are discrete and a task's nodes stay on it (its first tick on
    them is its warm-up, never repeated, since nothing moves them); the work is unknown
    and FIFO needs none of it, nor any loss report; a queued task whose deadline passes
    leaves the queue (it expired), as a job past its time limit would.
    """

    name = "fifo"

    def __init__(self, backfill: str = DEFAULT_BACKFILL) -> None:
        if backfill not in BACKFILL:
            raise ValueError(f"fifo: backfill={backfill!r}; expected one of {', '.join(BACKFILL)}")
        self.backfill = backfill

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.started = np.zeros(len(sim.status), bool)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        act = sim.active()  # index order is arrival order: the workload is sorted by arrival
        request = requested_nodes(sim, act)
        counts = np.zeros(len(sim.status), np.int64)
        running = self.started[act]
        counts[act[running]] = request[running]
        free = sim.config.num_nodes - int(counts.sum())
        queue, need = act[~running], request[~running]
        head = 0
        while head < len(queue) and need[head] <= free:
            counts[queue[head]] = need[head]
            free -= int(need[head])
            head += 1
        if head < len(queue) and self.backfill != "none":
            held = np.flatnonzero(counts)
            until, spare = shadow(free, int(need[head]), sim.workload.deadline[held], counts[held])
            for k, n in zip(queue[head + 1 :], need[head + 1 :]):
                if n > free:
                    continue
                if self.backfill == "easy" and sim.workload.deadline[k] > until:
                    if n > spare:
                        continue
                    spare -= int(n)
                counts[k] = n
                free -= int(n)
        self.started[np.flatnonzero(counts)] = True
        return counts
