"""A scheduler of your own, evaluated by the harness next to the built-in ones.

How to run (from the repository root; the harness imports ``my_scheduler`` in every
worker process, so its directory must be on ``PYTHONPATH``)::

    PYTHONPATH=examples mara evaluate --split val --loads 1.0,2.0 --episodes 10 \\
        --schedulers my_scheduler.LeastAttained,my_scheduler.LeastAttained:most=2,uniform,lara \\
        --out runs/my_scheduler

Results to expect (val split, 10 episodes per load): least attained service is far behind
``lara`` and ``uniform`` (about 0.45 vs 0.67 and 0.75 at load 1.0): it ignores deadlines
and keeps moving nodes to whichever task has had the least; ``most=2`` (at most two nodes
per task) spreads the nodes more thinly.

A scheduler only has to say how many nodes each task gets for the next tick
(:meth:`allocate`); the base class turns counts into per-node assignments that move as
few nodes as possible (:func:`mara_env.schedulers.place`).  Everything it may look at
is on the simulator ``sim`` (``docs/architecture.md``): ``sim.active()``,
``sim.work``, ``sim.nodes_now``, ``sim.hist_work`` / ``sim.hist_loss`` (each task's loss
reports) and ``sim.workload`` (``deadline``, ``cap``, ``target``, ``rate``, ``alpha``).
"""

from __future__ import annotations

import numpy as np

from mara_env.schedulers import Scheduler


class LeastAttained(Scheduler):
    """Least attained service first: the tasks that have received the least work get
    nodes first, up to ``most`` nodes each (default: their cap)."""

    name = "least_attained"

    def __init__(self, most: int | None = None) -> None:
        if most is not None and most < 1:
            raise ValueError(f"most={most}; expected at least 1 node per task")
        self.most = most

    def allocate(self, sim) -> np.ndarray:
        counts = np.zeros(len(sim.status), np.int64)
        left = sim.config.num_nodes
        act = sim.active()
        most = sim.workload.cap if self.most is None else np.minimum(sim.workload.cap, self.most)
        for k in act[np.argsort(sim.work[act], kind="stable")]:
            counts[k] = min(int(most[k]), left)
            left -= counts[k]
        return counts
