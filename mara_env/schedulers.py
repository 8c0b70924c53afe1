"""Scheduler interface, simple schedulers, and the episode runner they share.

A scheduler decides, once per tick, how many nodes each active task gets
(:meth:`Scheduler.allocate`); :func:`place` turns those counts into a per-node
assignment that keeps nodes on the task they already serve (avoiding warm-up ticks).
The same scheduler drives the simulator directly (:func:`run_episode`, the fast path)
or the PettingZoo env, one node action at a time (:class:`SchedulerAgent`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from mara_env.cluster import ClusterSim, ClusterState
from mara_env.compiled import maybe_njit
from mara_env.config import ClusterConfig
from mara_env.traces import TraceSet


class Scheduler(ABC):
    """Base class: override :meth:`allocate` (and :meth:`reset` if it keeps state)."""

    name: str = "scheduler"

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        """Called once at the start of every episode."""
        self.rng = rng

    @abstractmethod
    def allocate(self, sim: ClusterSim) -> np.ndarray:
        """Nodes per task (length = tasks in the episode), within caps, summing to <= N."""

    def assign(self, sim: ClusterSim) -> np.ndarray:
        """Per-node task index (-1 idle) for the next tick."""
        return place(sim, self.allocate(sim))


def place(sim: ClusterSim, counts: np.ndarray) -> np.ndarray:
    """Per-node assignment realising ``counts`` while moving as few nodes as possible.

    The first ``counts[k]`` nodes (by index) that served task ``k`` stay on it; the other
    nodes, in index order, fill the remaining places task by task in deadline order.  In
    the env this is the rule "stay while your task has room; otherwise join the first slot
    with ``count - nodes_chosen - nodes_pending > 0``", which a policy can learn exactly.
    """
    counts = np.asarray(counts, dtype=np.int64).copy()
    n_nodes = sim.config.num_nodes
    if counts.sum() > n_nodes:
        raise ValueError(f"allocation uses {counts.sum()} nodes; the cluster has {n_nodes}")
    assign = np.full(n_nodes, -1, np.int64)
    for i, k in enumerate(sim.node_task):
        if k >= 0 and counts[k] > 0:
            assign[i] = k
            counts[k] -= 1
    free = iter(np.flatnonzero(assign < 0))
    for k in edf_order(sim, np.flatnonzero(counts > 0)):
        for _ in range(counts[k]):
            assign[next(free)] = k
    return assign


def edf_order(sim: ClusterSim, tasks: np.ndarray | None = None) -> np.ndarray:
    """Active tasks (or ``tasks``) by earliest deadline, ties by arrival then id."""
    act = sim.active() if tasks is None else tasks
    wl = sim.workload
    return act[np.lexsort((act, wl.arrival[act], wl.deadline[act]))]


def fill_in_order(sim: ClusterSim, order: np.ndarray, want: np.ndarray | None = None) -> np.ndarray:
    """Give tasks in ``order`` what they want (default: their cap) until nodes run out."""
    counts = np.zeros(len(sim.status), np.int64)
    caps = sim.workload.cap[order] if want is None else np.minimum(want, sim.workload.cap[order])
    counts[order] = fill_caps(caps, sim.config.num_nodes)
    return counts


def fill_caps(wants: np.ndarray, nodes: int) -> np.ndarray:
    """Counts of tasks in order (rows of ``wants``): each gets what it wants until the
    ``nodes`` run out (the last one served gets what is left)."""
    wants = np.maximum(np.asarray(wants, np.int64), 0)
    before = np.cumsum(wants) - wants
    return np.clip(int(nodes) - before, 0, wants)


def ticks_needed(
    remaining: np.ndarray, nodes: np.ndarray, warm: np.ndarray, rate: np.ndarray, alpha: np.ndarray
) -> np.ndarray:
    """Ticks to finish ``remaining`` work on ``nodes`` nodes, ``warm`` of which served last tick.

    Arrays broadcast (tasks along axis 0).  Nodes beyond the warm ones give nothing in
    their first tick (warm-up); a task needs at least one tick with progress to report.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return ticks_formula(remaining, nodes, warm, rate, alpha)


def ticks_formula(
    remaining: np.ndarray, nodes: np.ndarray, warm: np.ndarray, rate: np.ndarray, alpha: np.ndarray
) -> np.ndarray:
    """:func:`ticks_needed`'s arithmetic, outside numpy's error state: array expressions
    that numba compiles as well (``flow_predictor.flow_share`` does: one formula for both)."""
    gain = rate * nodes**alpha
    warm_gain = np.where(warm > 0, rate * np.maximum(warm, 1) ** alpha, 0.0)
    steady = np.maximum(1.0, np.ceil(remaining / gain - 1e-9))
    after = np.maximum(1.0, np.ceil((remaining - warm_gain) / gain - 1e-9))
    grow = np.where((warm > 0) & (remaining <= warm_gain), 1.0, 1.0 + after)
    return np.where(nodes <= warm, steady, grow)


def warm_nodes(sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
    """Nodes that served each of ``tasks`` in the last tick (no warm-up if they stay)."""
    return sim.nodes_now[tasks]


def fair_share(
    sim: ClusterSim,
    order: np.ndarray,
    want: np.ndarray | None = None,
    last: np.ndarray | None = None,
) -> np.ndarray:
    """Nodes per task (length = tasks in the episode): ``order``'s tasks share the nodes
    round-robin, first up to ``want`` (aligned with ``order``), then up to their caps.
    Tasks flagged in ``last`` (aligned with ``order``) get nodes only once every other
    task has its cap (:func:`round_robin`)."""
    caps = sim.workload.cap[order]
    share = round_robin(
        caps,
        caps if want is None else np.asarray(want, np.int64),
        np.zeros(len(order), np.bool_) if last is None else np.asarray(last, np.bool_),
        sim.config.num_nodes,
    )
    counts = np.zeros(len(sim.status), np.int64)
    counts[order] = share
    return counts


@maybe_njit(cache=True)
def round_robin(caps: np.ndarray, want: np.ndarray, last: np.ndarray, nodes: int) -> np.ndarray:
    """:func:`fair_share`'s shares of ``nodes`` nodes (arrays aligned with the order): up to
    ``want``, then up to ``caps``, the tasks flagged ``last`` only after every other has
    its cap."""
    share = np.zeros(len(caps), np.int64)
    first = np.where(last, 0, caps)
    left = spread(share, np.minimum(want, first), nodes)
    left = spread(share, first, left)
    spread(share, caps, left)
    return share


@maybe_njit(cache=True)
def spread(counts: np.ndarray, want: np.ndarray, left: int) -> int:
    """Add nodes one at a time round-robin (in index order) up to ``want``; returns nodes
    left.  ``counts``: int64, changed in place."""
    while left > 0:
        gave = 0
        for i in range(len(counts)):
            if left == 0:
                break
            if counts[i] < want[i]:
                counts[i] += 1
                left -= 1
                gave += 1
        if gave == 0:
            break
    return left


class EDF(Scheduler):
    """Earliest deadline first: each task in deadline order gets its cap."""

    name = "edf"

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        return fill_in_order(sim, edf_order(sim))


class RandomScheduler(Scheduler):
    """Every node picks uniformly among active tasks with room and idling."""

    name = "random"

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        counts = np.zeros(len(sim.status), np.int64)
        act = sim.active()
        cap = sim.workload.cap
        for _ in range(sim.config.num_nodes):
            room = act[counts[act] < cap[act]]
            pick = self.rng.integers(len(room) + 1)
            if pick < len(room):
                counts[room[pick]] += 1
        return counts


class Uniform(Scheduler):
    """Share nodes as evenly as caps allow, leftovers to earlier deadlines."""

    name = "uniform"

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        return fair_share(sim, edf_order(sim))


SCHEDULERS: dict[str, type[Scheduler]] = {
    EDF.name: EDF,
    RandomScheduler.name: RandomScheduler,
    Uniform.name: Uniform,
}


def run_episode(
    scheduler: Scheduler,
    config: ClusterConfig,
    traces: TraceSet,
    seed: int,
    record: bool = False,
    backend: ClusterState | None = None,
) -> dict[str, Any]:
    """Run one episode on the simulator (fast path), or on ``backend``; returns its metrics.

    The workload is drawn exactly as ``raw_env.reset(seed=seed)`` draws it, so every
    scheduler, and a policy acting in the env, sees the same tasks for the same seed.
    The scheduler's own randomness comes from a generator derived from the seed.
    """
    sim = backend if backend is not None else ClusterSim(config, traces, record=record)
    sim.reset(np.random.default_rng(seed))
    scheduler.reset(sim, np.random.default_rng([seed, 1]))
    while not sim.done:
        sim.tick(scheduler.assign(sim))
    out: dict[str, Any] = sim.metrics()
    if record:
        out["allocation"] = np.array(sim.assign_log)
    return out


class SchedulerAgent:
    """Drives the PettingZoo env with a scheduler: per-node actions, one round at a time.

    At the start of a round it asks the scheduler for an assignment on the env's
    simulator, then each node takes the slot of its assigned task (idle if that task is
    not among the visible slots): :meth:`act_round` gives all ``N`` actions at once,
    :meth:`act` one node's.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._round: tuple[int, np.ndarray] | None = None

    def slots_for(self, num_nodes: int) -> int | None:
        """None: a scheduler sees the whole simulation, and observes any slot count."""
        return None

    def reset(self, env: Any, seed: int) -> None:
        """Call right after ``env.reset(seed=seed)``."""
        self.scheduler.reset(env.unwrapped.engine.sim, np.random.default_rng([seed, 1]))
        self._round = None

    def act_round(self, env: Any) -> np.ndarray:
        """The ``N`` node actions of the round ``env`` is at the start of."""
        engine = env.unwrapped.engine
        assign = self.scheduler.assign(engine.sim)
        k = engine.config.num_slots
        # slot of each task (K: not visible), then of each node's task (idle: K)
        slot_of = np.full(len(engine.sim.status) + 1, k, np.int64)
        visible = np.flatnonzero(engine.slot_tasks >= 0)
        slot_of[engine.slot_tasks[visible]] = visible
        return slot_of[np.where(assign >= 0, assign, -1)]

    def act(self, env: Any, agent: str) -> int:
        """The action of ``agent`` (the env's current agent)."""
        engine = env.unwrapped.engine
        sim = engine.sim
        if self._round is None or self._round[0] != sim.t or agent == engine.agents[0]:
            self._round = (sim.t, self.act_round(env))
        return int(self._round[1][engine.agents.index(agent)])
