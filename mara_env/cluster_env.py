"""PettingZoo environment: every compute node of the cluster is an agent.

:class:`raw_env` (its docstring is the specification), :func:`env` (wrapped; also
``mara_env.env``), :func:`parallel_env`, and the feature tables they observe.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers

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
# The id the env is registered under (``mara_env`` registers it); bump its version when
# the spaces, the dynamics or the trace library change what an episode means.
ENV_ID = "mara/ComputeCluster-v3"
# Older ids, still registered, and the settings that keep their behaviour.
V2_ID = "mara/ComputeCluster-v2"
V2_DEFAULTS = {"deadline_model": "unbiased"}
OBS_LIMIT = 10.0  # every feature is clipped to [-OBS_LIMIT, OBS_LIMIT]
TICK_SCALE = 20.0  # durations (ticks) are given in units of TICK_SCALE ticks
CAP_SCALE = 8.0  # node counts of a parallelism cap are given in units of CAP_SCALE nodes
LOG_RATIO_LIMIT = 5.0  # log_loss_ratio is clipped to [-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT]

# Column of each feature in its table (node row, slot row, queue summary).
_NODE = {name: i for i, name in enumerate(NODE_FEATURES)}
_SLOT = {name: i for i, name in enumerate(SLOT_FEATURES)}
_QUEUE = {name: i for i, name in enumerate(QUEUE_FEATURES)}


def env_name(env_id: str) -> str:
    """The ``metadata["name"]`` of an env id: ``ns/CamelName-vN`` -> ``ns_camel_name_vN``."""
    match = re.fullmatch(r"(\w+)/(\w+)-v(\d+)", env_id)
    if match is None:
        raise ValueError(f"env id {env_id!r}: expected NAMESPACE/Name-vVERSION")
    namespace, name, version = match.groups()
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return f"{namespace}_{snake}_v{version}"


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


def _make_config(
    config: ClusterConfig | dict[str, Any] | None, kwargs: dict[str, Any]
) -> ClusterConfig:
    if isinstance(config, ClusterConfig):
        return config.replace(**kwargs) if kwargs else config
    return ClusterConfig.from_dict({**(config or {}), **kwargs})


def _setup(
    env: Any,
    config: ClusterConfig | dict[str, Any] | None,
    render_mode: str | None,
    trace_set: TraceSet | None,
    kwargs: dict[str, Any],
    backend: ClusterState | None = None,
) -> None:
    """Shared constructor of the AEC and parallel envs: config, engine, agents."""
    if render_mode is not None and render_mode not in raw_env.metadata["render_modes"]:
        raise ValueError(f"render_mode {render_mode!r}; expected one of ['ansi'] or None")
    env.render_mode = render_mode
    env.config = _make_config(config, kwargs)
    env.engine = ClusterEngine(env.config, trace_set, backend)
    env.possible_agents = list(env.engine.agents)
    env.state_space = env.engine.observation_space["state"]


def _render(env: Any) -> str | None:
    if env.render_mode is None:
        gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi'")
        return None
    return env.engine.render_ansi()


class raw_env(AECEnv):
    """Compute-cluster scheduling: N nodes (agents) share themselves among learning tasks.

    **Agents** ``node_0 … node_{N-1}``.  In each decision round every node acts once, in
    index order; after the last node the simulator advances one tick.  Later nodes see
    earlier nodes' choices this round (``nodes_chosen`` and the mask) and how many of a
    task's current nodes have still to choose (``nodes_pending``): this ordering is the
    autoregressive factorisation of the joint action.

    **Tasks** arrive by a Poisson process (load factor ``load``: expected node-ticks
    demanded per tick / N) during ``horizon`` ticks; each follows a real learning curve
    from the trace library, must reach its target loss before its deadline, has a
    parallelism cap and a sub-linear speed-up ``n**alpha``.  A node that joins a task it
    did not serve in the previous tick contributes no work that tick (warm-up).
    Deadlines are what a user would set from their own estimate of the size,
    ``arrival + ceil(slack * estimate)``, and real users' estimates say little: by default
    (``deadline_model="padded"``) the estimate is a padded upper bound snapped up to a menu
    of round values (median 3.6x the size, log spread 1.0, a quarter at the queue's maximum,
    12 % below the size); ``"unbiased"`` is env v2's rule (``size * exp(0.5 z)``);
    ``"blind"`` gives another task's size as the estimate (see :class:`ClusterConfig`).
    Nothing in the observation names the model.

    **Action space** ``Discrete(K + 1)``: ``0 … K-1`` joins the task in that visible slot;
    ``K`` idles.  Slots hold the K active tasks with the earliest deadlines (ties: earlier
    arrival, lower id), in that order.

    **Observation space** ``Dict``:

    * ``observation`` ``Box(-10, 10, (8 + 13K,), float32)``: the node features
      :data:`NODE_FEATURES` followed by K rows of :data:`SLOT_FEATURES` (empty slots are
      all zero).
    * ``action_mask`` ``Box(0, 1, (K + 1,), int8)``: empty slots and slots whose task
      already has ``cap`` nodes chosen this round are 0; idle is always 1.
    * ``state`` ``Box(-10, 10, (8 + 13K + 4,), float32)``: the observation plus
      :data:`QUEUE_FEATURES` summarising active tasks beyond the visible slots (for a
      centralized critic).  ``state()`` returns it for the acting node; ``state_space``
      is this Box.

    Scales: durations are in units of :data:`TICK_SCALE` ticks, caps of :data:`CAP_SCALE`
    nodes; every feature is clipped to ``[-OBS_LIMIT, OBS_LIMIT]``.

    **Reward** (team; every node gets it at the end of a round): ``+1`` per task that
    completed in the tick, plus ``shaping * (Phi(s') - Phi(s))`` where Phi sums the
    normalised progress ``log(L0/L) / log(L0/target)`` of active tasks (0 for tasks that
    left, and 0 at the end of the episode).  With gamma = 1 an episode's shaped return
    equals its number of completions exactly.

    **Invalid actions**: an action outside ``Discrete(K + 1)`` raises
    :class:`InvalidActionError`.  A masked-out action counts as idle and is reported in
    ``infos[agent]`` (``masked_action``, ``masked_actions_total``); with ``strict=True`` it
    raises instead, naming agent, action and mask.

    **Termination**: when arrivals are over and every task has completed or expired.
    **Truncation**: after ``max_cycles`` decision rounds, if set.

    **Config**: keyword arguments or ``config=`` (dict or :class:`ClusterConfig`);
    ``trace_set=`` passes an already loaded :class:`TraceSet`; ``backend=`` runs the env
    over another cluster backend (a :class:`~mara_env.cluster.ClusterState`, such as a
    live cluster, whose own reset supplies the tasks) instead of a simulator.
    ``render_mode="ansi"`` renders the cluster and the queue as text.

    **Completion**: a task completes in the tick in which its work passes the first logged
    point of its trace with loss at or below its target (a job evaluates at those points
    and stops at the first good one), if that tick ends by its deadline; more nodes never
    complete it later.  Its reported loss (``log_loss_ratio``, ``progress``) is the last
    logged point at or below its work.  A task past its deadline expires.

    **Version history**: v3 — deadlines from a named ``deadline_model``, by default
    ``padded`` (users' estimates as published HPC logs show them: padded, rounded, a share
    at the maximum); spaces unchanged; ``mara/ComputeCluster-v2`` is still registered and
    makes ``unbiased`` deadlines, its episodes unchanged.  v2 — a task completes when its
    training passes a logged point at or below its target (v1 required the tick to *end* on
    such a point, so more nodes could make a task finish later or never); spaces unchanged.
    v1 — deadlines from a user's estimate (``deadline_sigma``) and trace library v2 (four
    families, held-out sources in val and test); spaces unchanged.  v0 — initial release
    (deadlines from the true size).
    """

    metadata = {
        "name": env_name(ENV_ID),
        "render_modes": ["ansi"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        config: ClusterConfig | dict[str, Any] | None = None,
        render_mode: str | None = None,
        trace_set: TraceSet | None = None,
        backend: ClusterState | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _setup(self, config, render_mode, trace_set, kwargs, backend)
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.observation_spaces = {a: self.engine.observation_space for a in self.possible_agents}
        self.action_spaces = {a: self.engine.action_space for a in self.possible_agents}

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.engine.reset(seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]
        self._round_ended = False

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        return self.engine.observe(self._index[agent])

    def state(self) -> np.ndarray:
        return self.engine.state(self._index[self.agent_selection])

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        i = self._index[agent]
        self._cumulative_rewards[agent] = 0.0
        if self._round_ended:
            self._clear_rewards()
            self._round_ended = False
        report = self.engine.act(i, action)
        self.infos[agent] = report or {}
        if i < len(self.possible_agents) - 1:
            # Mid-round steps give no reward: nothing to accumulate.
            self.agent_selection = self.possible_agents[i + 1]
            return
        reward, _ = self.engine.end_round()
        self.rewards = dict.fromkeys(self.agents, reward)
        self._round_ended = True
        if self.engine.finished:
            done = self.engine.sim.done
            metrics = self.engine.sim.metrics()
            for a in self.agents:
                self.terminations[a] = done
                self.truncations[a] = not done
                self.infos[a] = {**self.infos[a], "episode": metrics}
        self.agent_selection = self.agents[0]
        self._accumulate_rewards()

    def render(self) -> str | None:
        return _render(self)


class parallel_raw_env(ParallelEnv):
    """The same environment with all nodes choosing at once (see :class:`raw_env`).

    Actions are applied in node order, so a choice that became invalid because earlier
    nodes filled the task's cap (a collision) counts as idle and is reported in infos.
    """

    metadata = raw_env.metadata

    def __init__(
        self,
        config: ClusterConfig | dict[str, Any] | None = None,
        render_mode: str | None = None,
        trace_set: TraceSet | None = None,
        backend: ClusterState | None = None,
        **kwargs: Any,
    ) -> None:
        _setup(self, config, render_mode, trace_set, kwargs, backend)
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.engine.observation_space

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.engine.action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.engine.reset(seed)
        self.agents = list(self.possible_agents)
        return self._observations(), {a: {} for a in self.agents}

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        # Everyone observes the round's start: they choose simultaneously.
        return {a: self.engine.observe(i) for i, a in enumerate(self.agents)}

    def state(self) -> np.ndarray:
        return self.engine.state(0)

    def step(self, actions: dict[str, Any]):
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        for i, agent in enumerate(self.possible_agents):
            if agent in actions:
                infos[agent] = self.engine.act(i, actions[agent]) or {}
        reward, _ = self.engine.end_round()
        rewards = dict.fromkeys(self.agents, reward)
        done, trunc = self.engine.sim.done, self.engine.truncated
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, trunc and not done)
        observations = self._observations()
        if done or trunc:
            metrics = self.engine.sim.metrics()
            infos = {a: {**infos[a], "episode": metrics} for a in self.agents}
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        return _render(self)


class _ActionCheck(wrappers.AssertOutOfBoundsWrapper):
    """PettingZoo's out-of-bounds check with the env's own error: an action outside the
    action space raises :class:`InvalidActionError` naming the agent and the value (the
    standard wrapper raises a bare ``AssertionError``, or ``OverflowError`` for ``2**70``)."""

    def __init__(self, env: raw_env) -> None:
        super().__init__(env)
        self._raw = env

    def step(self, action: Any) -> None:
        raw = self._raw
        agent = raw.agent_selection
        # None is the only action of a dead agent; anything else there is raw_env's error.
        if not (raw.terminations[agent] or raw.truncations[agent]):
            raw.engine.check_action(raw._index[agent], action)
        raw.step(action)


class _OrderEnforcing(wrappers.OrderEnforcingWrapper):
    """PettingZoo's order enforcement.  Once reset, ``last()`` and public attributes are
    read from the raw env directly: the wrapper below adds no attribute and does not
    change observations, and the chain through each wrapper's ``__getattr__`` otherwise
    costs more than a step of the env itself."""

    def __init__(self, env: _ActionCheck) -> None:
        super().__init__(env)
        self._raw = env.unwrapped

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("_has_reset") and not name.startswith("_"):
            return getattr(self._raw, name)
        return super().__getattr__(name)

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self._raw.last(observe) if self._has_reset else super().last(observe)


def env(**kwargs: Any) -> AECEnv:
    """The AEC environment wrapped in PettingZoo's standard wrappers."""
    return _OrderEnforcing(_ActionCheck(raw_env(**kwargs)))


def parallel_env(**kwargs: Any) -> ParallelEnv:
    """The parallel (simultaneous-choice) environment."""
    return parallel_raw_env(**kwargs)


def _v2(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with env v2's settings where neither they nor a config dict set them (a
    :class:`ClusterConfig` is taken as it is: it names every setting)."""
    config = kwargs.get("config")
    if isinstance(config, ClusterConfig):
        return kwargs
    given = {**(config or {}), **kwargs}
    return {**kwargs, **{k: v for k, v in V2_DEFAULTS.items() if k not in given}}


def env_v2(**kwargs: Any) -> AECEnv:
    """``mara/ComputeCluster-v2``: :func:`env` with env v2's deadlines (``unbiased``)."""
    return env(**_v2(kwargs))


def parallel_env_v2(**kwargs: Any) -> ParallelEnv:
    """``mara/ComputeCluster-v2``: :func:`parallel_env` with env v2's deadlines."""
    return parallel_env(**_v2(kwargs))


def play_random(env: AECEnv, seed: int) -> None:
    """One episode of ``env`` (any AEC view of the cluster, reset here with ``seed``) under
    uniformly random valid actions: the random *policy*, as a learned policy's floor through
    the same API (the ``random`` scheduler is another thing: it keeps nodes in place)."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else int(rng.choice(np.flatnonzero(obs["action_mask"]))))
