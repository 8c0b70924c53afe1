"""Tiresias (Gu et al., NSDI 2019): discretised two-dimensional least-attained-service."""

from __future__ import annotations

import numpy as np

from mara_agents.baselines.fifo import requested_nodes
from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler

# Chosen on the validation split (docs/baselines.md): `python benchmarks/tune_baselines.py
# --scheduler tiresias --episodes 50 --workers 2`: 0.527 ± 0.016 (mean completion over loads
# 1 and 2), the best of thresholds {16, 32, 64, 16-64} x starve {0, 8}.
DEFAULT_THRESHOLDS = "64"
DEFAULT_STARVE = 8


def parse_thresholds(value: str | int | float) -> tuple[float, ...]:
    """Queue thresholds in node-ticks from ``"8-32"`` (or one number); one error naming it."""
    try:
        out = tuple(float(x) for x in str(value).split("-"))
    except ValueError:
        out = ()
    if not out or any(not (0 <= a < b < np.inf) for a, b in zip((0.0, *out), out)):
        raise ValueError(
            f"tiresias: thresholds={value!r}; expected increasing positive node-tick "
            "thresholds separated by '-', e.g. '8-32'"
        )
    return out


class Tiresias(Scheduler):
    """Tiresias' discretised 2D-LAS (Gu, Chowdhury, Wu, et al., "Tiresias: A GPU Cluster
    Manager for Distributed Deep Learning", NSDI 2019), the variant that needs no job size.

    What it does here: a task's attained service is the node-ticks it has held (GPUs ×
    time, the paper's two dimensions; ``sim.node_ticks_used``).  ``thresholds`` (node-ticks,
    ``"8-32"`` = three queues) split the tasks into priority queues: a task starts in the
    first and is demoted to the next once its attained service reaches its queue's
    threshold.  Every tick the tasks are taken queue by queue, first-come first-served
    within a queue (by arrival), and each gets its whole request (gang: ``n_ref =
    min(cap, ref_nodes)``, :func:`~mara_agents.baselines.fifo.requested_nodes`) if that
    many nodes are still free, else nothing; a task that does not fit is skipped, so a
    later one that fits may use the nodes (no node idles while a waiting request fits).
    Preemptive: a task that arrives, or is promoted, in a higher queue takes the nodes of
    tasks of lower queues.  ``starve`` (ticks, 0: off) is the paper's STARVELIMIT: a task
    that has waited that many ticks in a row without nodes goes back to the first queue,
    its attained service counted afresh from then.

    Adaptations: decisions at tick boundaries only, where the paper reacts to arrivals,
    completions and demotions as they happen; discrete nodes, without the paper's
    placement (consolidation) profiles; the work is unknown, and 2D-LAS needs none of it
    (the paper's Gittins-index variant needs a distribution of job sizes, which is not
    used here); a preempted task loses its nodes and pays the simulator's warm-up tick
    when it gets nodes again (the paper's checkpoint-restore cost); deadlines are ignored,
    as in the paper.
    """

    name = "tiresias"

    def __init__(
        self, thresholds: str | int | float = DEFAULT_THRESHOLDS, starve: int = DEFAULT_STARVE
    ) -> None:
        self.thresholds = parse_thresholds(thresholds)
        if isinstance(starve, bool) or not (isinstance(starve, int) and starve >= 0):
            raise ValueError(f"tiresias: starve={starve!r}; expected a whole number >= 0 of ticks")
        self.starve = starve

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        n = len(sim.status)
        self.since = np.zeros(n, np.int64)  # attained service when last (re)entering queue 1
        self.waited = np.zeros(n, np.int64)  # ticks in a row without nodes
        self._tick = -1  # the tick ``waited`` was last brought up to date for

    def queues(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Queue of each of ``tasks`` (0 = highest priority) from its attained service."""
        service = sim.node_ticks_used[tasks] - self.since[tasks]
        return np.searchsorted(self.thresholds, service, side="right")

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        act = sim.active()
        if sim.t != self._tick:  # once per tick, however often the tick is planned
            self._tick = sim.t
            # tasks that were there last tick: served (0) or one more tick of waiting
            was = act[sim.workload.arrival[act] < sim.t]
            self.waited[was] = np.where(sim.nodes_now[was] > 0, 0, self.waited[was] + 1)
            if self.starve:
                starved = act[self.waited[act] >= self.starve]
                self.since[starved] = sim.node_ticks_used[starved]
                self.waited[starved] = 0
        counts = np.zeros(len(sim.status), np.int64)
        left = sim.config.num_nodes
        request = requested_nodes(sim, act)
        # arrival order is index order (the workload is sorted by arrival): a stable sort
        # on the queue keeps it within each queue
        for i in np.argsort(self.queues(sim, act), kind="stable"):
            if request[i] <= left:
                counts[act[i]] = request[i]
                left -= int(request[i])
        return counts
