"""The decision-round engine both envs share, and the feature tables it observes.

:class:`ClusterEngine` turns a cluster backend (the simulator, or a live cluster) into
decision rounds: slots, masks, every feature of :data:`NODE_FEATURES`,
:data:`SLOT_FEATURES` and :data:`QUEUE_FEATURES`, rewards.  The envs of
:mod:`mara_env.cluster_env` (the AEC and parallel views; ``raw_env``'s docstring is the
specification) and :mod:`mara_env.round_env` are views over it, as PettingZoo's own envs
keep the board apart from the env.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces

from mara_env.cluster import ClusterSim, ClusterState
from mara_env.config import ClusterConfig
from mara_env.node_view import inverse_caps, slot_view
from mara_env.schedulers import edf_order
from mara_env.traces import LOSS_FLOOR, TraceSet, load_traces
from mara_env.workload import reference_nodes

NODE_FEATURES = (
    "has_task",  # 1 if this node served a task in the last tick
    "task_visible",  # 1 if that task is in one of the K visible slots
    "agent_position",  # i / N: this node's place in the decision round
    "nodes_after",  # (N - 1 - i) / N: nodes still to choose after this one
    "utilisation",  # fraction of nodes busy in the last tick
    "active_tasks",  # active tasks / K
    "queued_tasks",  # active tasks not visible (beyond K) / K
    "time",  # t / horizon
)
SLOT_FEATURES = (
    "occupied",  # 1 if the slot holds a task (all others are 0 when not)
    "log_loss_ratio",  # log(reported loss / target), clipped to +-LOG_RATIO_LIMIT
    "slope",  # d log loss / d log work over the last 4 reports, clipped to [-5, 1]
    "progress",  # log(L0 / L) / log(L0 / target) in [0, 1]
    "service",  # work done / (rate * n_ref**alpha) / TICK_SCALE: reference ticks of service
    "time_left",  # (deadline - t) / TICK_SCALE
    "age",  # (t - arrival) / TICK_SCALE
    "nodes_now",  # nodes that served the task in the last tick / cap
    "nodes_chosen",  # nodes that chose it so far in this round / cap
    "nodes_pending",  # nodes that served it in the last tick and have not chosen yet / cap
    "cap",  # parallelism cap / CAP_SCALE
    "alpha",  # speed-up exponent
    "is_mine",  # 1 if this node served the task in the last tick (no warm-up cost)
)
QUEUE_FEATURES = (
    "queue_count",  # active tasks beyond the K visible slots / K
    "queue_time_left",  # their mean (deadline - t) / TICK_SCALE
    "queue_progress",  # their mean progress
    "queue_cap",  # their mean parallelism cap / CAP_SCALE
)
OBS_LIMIT = 10.0  # every feature is clipped to [-OBS_LIMIT, OBS_LIMIT]
TICK_SCALE = 20.0  # durations (ticks) are given in units of TICK_SCALE ticks
CAP_SCALE = 8.0  # node counts of a parallelism cap are given in units of CAP_SCALE nodes
LOG_RATIO_LIMIT = 5.0  # log_loss_ratio is clipped to [-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT]

# Column of each feature in its table (node row, slot row, queue summary).
_NODE = {name: i for i, name in enumerate(NODE_FEATURES)}
_SLOT = {name: i for i, name in enumerate(SLOT_FEATURES)}
_QUEUE = {name: i for i, name in enumerate(QUEUE_FEATURES)}


@functools.lru_cache(maxsize=8)
def _cached_traces(path: str | None, split: str, families: tuple[str, ...] | None) -> TraceSet:
    return load_traces(path, split=split, families=list(families) if families else None)


class InvalidActionError(ValueError):
    """An action is outside the action space, or masked out while ``strict=True``."""


class ClusterEngine:
    """Decision rounds over a cluster backend (a :class:`ClusterSim` unless ``backend`` is
    given, e.g. a live cluster): slots, masks, features, rewards.

    Shared by the AEC and the parallel environment so both have one semantics.
    """

    def __init__(
        self,
        config: ClusterConfig,
        traces: TraceSet | None = None,
        backend: ClusterState | None = None,
    ) -> None:
        self.config = config
        if backend is None:
            traces = traces or _cached_traces(config.traces, config.split, config.families)
            backend = ClusterSim(config, traces)
        elif backend.config.num_nodes != config.num_nodes:
            raise ValueError(
                f"backend has {backend.config.num_nodes} nodes; the env config has "
                f"{config.num_nodes}"
            )
        self.sim = backend
        self.traces = getattr(backend, "traces", traces)  # None on a live cluster
        n, k = config.num_nodes, config.num_slots
        self.agents = [f"node_{i}" for i in range(n)]
        self.obs_dim = len(NODE_FEATURES) + k * len(SLOT_FEATURES)
        self.state_dim = self.obs_dim + len(QUEUE_FEATURES)
        self.observation_space = spaces.Dict(
            {
                "observation": spaces.Box(-OBS_LIMIT, OBS_LIMIT, (self.obs_dim,), np.float32),
                "action_mask": spaces.Box(0, 1, (k + 1,), np.int8),
                "state": spaces.Box(-OBS_LIMIT, OBS_LIMIT, (self.state_dim,), np.float32),
            }
        )
        self.action_space = spaces.Discrete(k + 1)
        # Flat positions, inside ``state`` (``observation`` is its prefix), of the slot
        # columns that change while a round goes on; lists: indexed one at a time.
        self._node_dim = len(NODE_FEATURES)
        rows = self._node_dim + np.arange(k) * len(SLOT_FEATURES)
        self._chosen_at = (rows + _SLOT["nodes_chosen"]).tolist()
        self._pending_at = (rows + _SLOT["nodes_pending"]).tolist()
        self._mine_at = (rows + _SLOT["is_mine"]).tolist()
        # Node features that never change: each node's place in the decision round.
        self._node_template = np.zeros((n, self._node_dim), np.float32)
        self._node_template[:, _NODE["agent_position"]] = np.arange(n) / n
        self._node_template[:, _NODE["nodes_after"]] = (n - 1 - np.arange(n)) / n

    # ---- lifecycle -------------------------------------------------------------
    def reset(self, seed: int | None) -> None:
        """New episode; all randomness comes from one Generator seeded here."""
        # seed=None continues the current stream (Gymnasium semantics) once seeded.
        if seed is not None or not hasattr(self, "rng"):
            self.rng = np.random.default_rng(seed)
        self.sim.reset(self.rng)
        self.rounds = 0
        self.truncated = False
        self.invalid_counts = np.zeros(self.config.num_nodes, np.int64)
        self.last_invalid: dict[int, dict[str, Any]] = {}
        self._begin_round()

    @property
    def finished(self) -> bool:
        return self.sim.done or self.truncated

    def _begin_round(self, phi: float | None = None) -> None:
        cfg, sim = self.config, self.sim
        wl, k, n = sim.workload, cfg.num_slots, cfg.num_nodes
        # the schedulers' order: flow_share's counts and pred_share agree while they share it
        ranked = edf_order(sim)
        visible, self.queued = ranked[:k], ranked[k:]
        self.slot_tasks = np.full(k, -1, np.int64)
        self.slot_tasks[: len(visible)] = visible
        self.slot_cap = np.zeros(k, np.int64)
        self.slot_cap[: len(visible)] = wl.cap[visible]
        self.chosen = np.zeros(k, np.int64)
        # slot of the task each node served in the last tick (-1: none or not visible),
        # and per slot how many of those nodes have not chosen yet in this round
        slot_of = np.full(len(wl.cap) + 1, -1, np.int64)  # the last entry serves idle (-1)
        slot_of[visible] = np.arange(len(visible))
        self._node_slot = slot_of[sim.node_task]
        self.pending = np.bincount(self._node_slot[self._node_slot >= 0], minlength=k)
        self.assign = np.full(n, -1, np.int64)
        self._mask = np.ones(k + 1, np.int8)  # idle (the last action) is never masked
        self._inv_cap = inverse_caps(np, self.slot_cap)
        # Everything is computed once a round: every node's own features (one row per
        # node), and the shared part of ``state``, which act() keeps up to date with the
        # round's choices; observe() then copies the shared part and adds the node's row.
        busy = sim.node_task >= 0
        nodes = self._node_template.copy()
        nodes[:, _NODE["has_task"]] = busy
        nodes[:, _NODE["task_visible"]] = self._node_slot >= 0
        # all >= 0; the counts of tasks and the time can exceed the limit
        nodes[:, _NODE["utilisation"]] = np.count_nonzero(busy) / n
        nodes[:, _NODE["active_tasks"]] = min(len(ranked) / k, OBS_LIMIT)
        nodes[:, _NODE["queued_tasks"]] = min(len(self.queued) / k, OBS_LIMIT)
        nodes[:, _NODE["time"]] = min(sim.t / cfg.horizon, OBS_LIMIT)
        self._nodes = nodes
        shared = np.zeros(self.state_dim, np.float32)
        shared[self._node_dim : self.obs_dim] = self._slot_matrix(visible).ravel()
        shared[self.obs_dim :] = self._queue_features()
        np.clip(shared, -OBS_LIMIT, OBS_LIMIT, out=shared)
        self._shared = shared
        self._refresh_slots(slice(0, k))
        self.phi = sim.potential() if phi is None else phi

    def _slot_matrix(self, tasks: np.ndarray) -> np.ndarray:
        cfg, sim = self.config, self.sim
        wl, t = sim.workload, sim.t
        f = np.zeros((cfg.num_slots, len(SLOT_FEATURES)), np.float32)
        s = len(tasks)
        if s == 0:
            return f
        n_ref = reference_nodes(wl, cfg, tasks)
        ref_rate = wl.rate[tasks] * n_ref ** wl.alpha[tasks]
        log_loss = np.log(np.maximum(sim.reported[tasks], LOSS_FLOOR))
        log_ratio = log_loss - sim._log_target[tasks]
        f[:s, _SLOT["occupied"]] = 1.0
        f[:s, _SLOT["log_loss_ratio"]] = np.clip(log_ratio, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        f[:s, _SLOT["slope"]] = sim.slope[tasks]
        f[:s, _SLOT["progress"]] = sim.progress(tasks)
        f[:s, _SLOT["service"]] = sim.work[tasks] / ref_rate / TICK_SCALE
        f[:s, _SLOT["time_left"]] = (wl.deadline[tasks] - t) / TICK_SCALE
        f[:s, _SLOT["age"]] = (t - wl.arrival[tasks]) / TICK_SCALE
        f[:s, _SLOT["nodes_now"]] = sim.nodes_now[tasks] / wl.cap[tasks]
        f[:s, _SLOT["cap"]] = wl.cap[tasks] / CAP_SCALE
        f[:s, _SLOT["alpha"]] = wl.alpha[tasks]
        return f

    def _refresh_slots(self, s: int | slice) -> None:
        """Write the round's per-node columns and mask entries of slot(s) ``s`` from their
        counts (:func:`mara_env.node_view.slot_view`)."""
        chosen, pending, room = slot_view(
            self.chosen[s], self.pending[s], self._inv_cap[s], self.slot_cap[s]
        )
        self._shared[self._chosen_at[s]] = chosen
        self._shared[self._pending_at[s]] = pending
        self._mask[s] = room

    def _queue_features(self) -> np.ndarray:
        f = np.zeros(len(QUEUE_FEATURES), np.float32)
        q = self.queued
        if not len(q):
            return f
        wl = self.sim.workload
        f[_QUEUE["queue_count"]] = len(q) / self.config.num_slots
        f[_QUEUE["queue_time_left"]] = np.mean(wl.deadline[q] - self.sim.t) / TICK_SCALE
        f[_QUEUE["queue_progress"]] = np.mean(self.sim.progress(q))
        f[_QUEUE["queue_cap"]] = np.mean(wl.cap[q]) / CAP_SCALE
        return f

    # ---- per-node views ------------------------------------------------------------
    def mask(self) -> np.ndarray:
        """Action mask (int8) for the node about to choose in this round."""
        return self._mask.copy()

    def state(self, i: int) -> np.ndarray:
        """Global state as node ``i`` sees it, given the choices made so far in this round."""
        state = self._shared.copy()
        state[: self._node_dim] = self._nodes[i]
        s = self._node_slot[i]
        if s >= 0:
            state[self._mine_at[s]] = 1.0
        return state

    def node_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """This round's node features of every node ``(N, len(NODE_FEATURES))`` and the
        visible slot of the task each served in the last tick (-1: none); copies.  With
        :meth:`observe` of node 0 before anyone chooses they give every node's view
        (:mod:`mara_env.round_env`)."""
        return self._nodes.copy(), self._node_slot.copy()

    def observe(self, i: int) -> dict[str, np.ndarray]:
        """Observation of node ``i`` given the choices made so far in this round."""
        state = self.state(i)
        return {
            "observation": state[: self.obs_dim].copy(),
            "action_mask": self._mask.copy(),
            "state": state,
        }

    # ---- acting ------------------------------------------------------------------
    def check_action(self, i: int, action: Any) -> int:
        """``action`` of node ``i`` as an int; :class:`InvalidActionError` if it is not in
        the action space (the message names the node and the value)."""
        k = self.config.num_slots
        try:
            a = int(action)
        except (TypeError, ValueError, OverflowError):
            raise InvalidActionError(
                f"node_{i}: action {action!r} is not an integer in [0, {k}]"
            ) from None
        if a != action or not 0 <= a <= k:
            raise InvalidActionError(
                f"node_{i}: action {action!r} is outside the action space Discrete({k + 1})"
            )
        return a

    def act(self, i: int, action: Any) -> dict[str, Any] | None:
        """Record node ``i``'s choice; returns an info entry if it was masked out."""
        a = self.check_action(i, action)
        k, mask = self.config.num_slots, self._mask
        if a < k and not mask[a] and self.config.strict:
            raise InvalidActionError(
                f"node_{i}: action {a} is masked out (mask {self.mask().tolist()}); "
                f"slot {a} is {'empty' if self.slot_tasks[a] < 0 else 'at its parallelism cap'}"
            )
        s = self._node_slot[i]
        if s >= 0:
            self.pending[s] -= 1
            self._refresh_slots(s)
        if a == k:
            return None
        if mask[a]:
            self.chosen[a] += 1
            self.assign[i] = self.slot_tasks[a]
            self._refresh_slots(a)
            return None
        self.invalid_counts[i] += 1
        self.last_invalid[i] = {"asked": a, "mask": mask.tolist()}
        return {"masked_action": a, "masked_actions_total": int(self.invalid_counts[i])}

    def end_round(self) -> tuple[float, dict[str, Any]]:
        """Advance the simulator one tick; returns the team reward and tick summary."""
        res = self.sim.tick(self.assign)
        self.rounds += 1
        if self.config.max_cycles is not None and self.rounds >= self.config.max_cycles:
            self.truncated = not self.sim.done
        # Phi of a terminal (or truncated) state is 0, so the shaped return equals the
        # number of completions exactly (potential-based shaping, gamma = 1).
        phi_next = 0.0 if self.finished else self.sim.potential()
        reward = len(res.completed) + self.config.shaping * (phi_next - self.phi)
        summary = {"tick": self.sim.t, "completed": len(res.completed), "expired": len(res.expired)}
        self._begin_round(phi_next)
        return float(reward), summary

    def render_ansi(self) -> str:
        """Text picture of the cluster (which slot each node serves) and the queue."""
        sim, wl = self.sim, self.sim.workload
        slot_of = {int(t): s for s, t in enumerate(self.slot_tasks) if t >= 0}
        nodes = " ".join("." if t < 0 else str(slot_of.get(int(t), "?")) for t in sim.node_task)
        lines = [f"tick {sim.t}  nodes: [{nodes}]  (slot served in the last tick, . idle)"]
        lines.append("slot task  loss/target  progress  left  nodes/cap  chosen  pending")
        for s, k in enumerate(self.slot_tasks):
            if k < 0:
                continue
            lines.append(
                f"{s:>4} {k:>4}  {sim.reported[k] / wl.target[k]:>11.3f}  "
                f"{sim.progress(np.array([k]))[0]:>8.2f}  {wl.deadline[k] - sim.t:>4}  "
                f"{sim.nodes_now[k]:>4}/{wl.cap[k]:<4}  {self.chosen[s]:>6}  {self.pending[s]:>7}"
            )
        if len(self.queued):
            lines.append(f"+ {len(self.queued)} queued beyond the visible slots")
        m = sim.metrics()
        lines.append(f"completed {m['completed']}  expired {m['expired']}  of {len(wl)} tasks")
        return "\n".join(lines)
