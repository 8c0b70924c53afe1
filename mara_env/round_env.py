"""The cluster as a single-agent Gymnasium env: one step is one decision round of all N nodes.

A view over the same :class:`~mara_env.engine.ClusterEngine` as the AEC env (it drives
the engine's ``act``/``end_round``; no round logic of its own), for learners that pick the
N node actions of a round together, such as a Multi-Agent-Transformer-style decoder.
:func:`play_episode` is the one episode loop of a :class:`RoundAgent` (the evaluation
harness, behaviour cloning and live mode drive their agents with it).
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from mara_env.cluster_env import raw_env
from mara_env.engine import NODE_FEATURES, OBS_LIMIT, SLOT_FEATURES, InvalidActionError

_MINE = SLOT_FEATURES.index("is_mine")
WORKLOAD_SEED = "workload_seed"  # reset info key: the seed of a seeded reset
_CAP_HIGH = np.iinfo(np.int32).max


class RoundAgent(Protocol):
    """What :func:`play_episode` drives: reset with the env, then one round at a time."""

    def reset(self, env: Any, seed: int) -> None:
        """Called right after ``env.reset(seed=seed)``."""

    def act_round(self, env: Any) -> np.ndarray:
        """The ``N`` node actions (slot ``0 … K-1``, or ``K`` = idle) of the round ``env``
        is at the start of, in node order."""


def play_episode(agent: RoundAgent, env: AECEnv, seed: int) -> list[float]:
    """The episode loop: reset ``env`` (the AEC env, or a wrapper of it) and ``agent`` with
    ``seed``, then play each round with ``agent.act_round`` until the episode ends; returns
    the team reward of every round (the episode's metrics: ``env.unwrapped.engine.sim``)."""
    env.reset(seed=seed)
    agent.reset(env, seed)
    rounds = RoundEnv(env)
    rewards = []
    while not rounds.engine.finished:
        rewards.append(rounds.play(agent.act_round(env))[0])
    return rewards


class RoundEnv(gymnasium.Env):
    """Compute-cluster scheduling, one decision round of all nodes per step.

    The cluster, tasks, reward and episode end are those of
    :class:`mara_env.cluster_env.raw_env`; this view only changes who acts.

    **Construction**: ``RoundEnv(env)`` over an AEC env (``raw_env``, ``env()``, or a
    wrapper that adds per-slot features, such as the predictor wrapper, whose features stay
    fixed during a round); ``RoundEnv(**kwargs)`` builds ``raw_env(**kwargs)``.  Resets go
    through that env, so its wrappers stay in step.

    **Action space** ``MultiDiscrete([K + 1] * N)``: node ``i``'s action, as in the AEC
    env (slot ``0 … K-1`` or ``K`` = idle), applied in node order.  A masked-out action (a
    slot already filled to its cap by earlier nodes this round) counts as idle and is
    counted in ``info["masked_actions"]``; with ``strict=True`` it raises.  An action
    outside the space raises :class:`~mara_env.engine.InvalidActionError`.

    **Observation space** ``Dict``, the round before any node has chosen:

    * ``nodes`` ``(N, 8)`` float32: each node's :data:`~mara_env.engine.NODE_FEATURES`;
    * ``slots`` ``(K, S)`` float32: the slot rows (``S = 13`` plus any wrapper features)
      with ``nodes_chosen = 0``, ``nodes_pending`` at its round start and ``is_mine = 0``;
    * ``queue`` ``(4,)`` float32: :data:`~mara_env.engine.QUEUE_FEATURES`;
    * ``node_slot`` ``(N,)`` int64: the slot of the task each node served in the last
      tick, ``-1`` for none (idle, or a task not among the visible slots);
    * ``slot_cap`` ``(K,)`` int64: each slot's parallelism cap (0: empty slot);
    * ``action_mask`` ``(K + 1,)`` int8: the mask node 0 sees.

    **What the AEC env shows node i**, given the earlier actions ``a_0 … a_{i-1}`` (each
    valid; with ``c = max(slot_cap, 1)``, counts multiplied by ``1 / c`` in float64 and
    rounded to float32, as the engine does):

    * ``observation = nodes[i] ++ slots`` with, in every slot row ``s``,
      ``nodes_chosen = #{j < i: a_j = s} / c``,
      ``nodes_pending = (#{j: node_slot[j] = s} - #{j < i: node_slot[j] = s}) / c`` and
      ``is_mine = [node_slot[i] = s]``;
    * ``action_mask = action_mask`` with slot ``s`` cleared where
      ``#{j < i: a_j = s} >= slot_cap[s]``;
    * ``state = observation ++ queue``.

    :func:`mara_agents.policy.rounds.per_node_features` rebuilds these views for the
    policy's decoder, its teacher forcing and behaviour cloning; a test checks them
    against the AEC env's ``observe`` at every node.

    **Reward**: the team reward of the round (completions plus the shaping term),
    the same number every node gets in the AEC env.  **Termination** / **truncation**:
    as the AEC env; the final ``info`` holds ``episode`` (the simulator's metrics).  The
    ``info`` of a seeded reset holds ``workload_seed``: episodes reset with the same seed
    run the same workload (group-relative baselines pair them by it).

    **Version history**: v0 — initial release.
    """

    metadata = {"name": "mara_compute_cluster_rounds_v0", "render_modes": ["ansi"]}

    def __init__(
        self, env: AECEnv | None = None, render_mode: str | None = None, **kwargs: Any
    ) -> None:
        if env is not None and kwargs:
            raise TypeError(f"RoundEnv: pass an env or config keywords, not both ({kwargs})")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r}; expected one of ['ansi'] or None")
        self.render_mode = render_mode
        self.aec = env if env is not None else raw_env(**kwargs)
        self.engine = self.aec.unwrapped.engine
        cfg = self.engine.config
        n, k = cfg.num_nodes, cfg.num_slots
        self._agent0 = self.engine.agents[0]
        space = self.aec.observation_space(self._agent0)
        self._obs_dim = space["observation"].shape[0]
        self._node_dim = len(NODE_FEATURES)
        slot_dim = (self._obs_dim - self._node_dim) // k
        queue_dim = space["state"].shape[0] - self._obs_dim
        box = spaces.Box
        self.observation_space = spaces.Dict(
            {
                "nodes": box(-OBS_LIMIT, OBS_LIMIT, (n, self._node_dim), np.float32),
                "slots": box(-OBS_LIMIT, OBS_LIMIT, (k, slot_dim), np.float32),
                "queue": box(-OBS_LIMIT, OBS_LIMIT, (queue_dim,), np.float32),
                "node_slot": box(-1, k - 1, (n,), np.int64),
                "slot_cap": box(0, _CAP_HIGH, (k,), np.int64),
                "action_mask": box(0, 1, (k + 1,), np.int8),
            }
        )
        self.action_space = spaces.MultiDiscrete([k + 1] * n)
        self._slot_shape = (k, slot_dim)

    def observe(self) -> dict[str, np.ndarray]:
        """The observation of the current round, before any node has chosen (also valid
        on an env another driver steps, at the start of a round)."""
        engine = self.engine
        nodes, node_slot = engine.node_rows()
        first = self.aec.observe(self._agent0)  # node 0 before anyone chose
        slots = first["observation"][self._node_dim :].reshape(self._slot_shape).copy()
        slots[:, _MINE] = 0.0  # node 0's own mark; each node's is in node_slot
        return {
            "nodes": nodes,
            "slots": slots,
            "queue": first["state"][self._obs_dim :].copy(),
            "node_slot": node_slot,
            "slot_cap": engine.slot_cap.copy(),
            "action_mask": first["action_mask"].copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.aec.reset(seed=seed, options=options)
        return self.observe(), ({} if seed is None else {WORKLOAD_SEED: seed})

    def _check(self, action: Any) -> np.ndarray:
        """``action`` as N ints; :class:`InvalidActionError` naming the node otherwise."""
        n, k = self.engine.config.num_nodes, self.engine.config.num_slots
        a = np.asarray(action)
        if a.shape != (n,):
            raise InvalidActionError(
                f"round action of shape {a.shape}; expected ({n},): one action per node"
            )
        if not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() > k:
            for i, x in enumerate(a.tolist()):
                self.engine.check_action(i, x)  # raises, naming the first bad node
        return a.astype(np.int64, copy=False)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        reward, info = self.play(action)
        done = self.engine.sim.done
        return self.observe(), reward, done, self.engine.truncated and not done, info

    def play(self, action: Any) -> tuple[float, dict[str, Any]]:
        """:meth:`step` without building the next observation (for drivers that do not
        read it, such as the evaluation harness): the round's reward and ``info``; the
        episode is over once ``engine.finished``."""
        engine = self.engine
        actions = self._check(action).tolist()
        masked = 0
        for i, a in enumerate(actions):
            if engine.act(i, a) is not None:
                masked += 1
        reward, _ = engine.end_round()
        info: dict[str, Any] = {"masked_actions": masked}
        if engine.finished:
            info["episode"] = engine.sim.metrics()
        return reward, info

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi'")
            return None
        return self.engine.render_ansi()


class MixedRoundEnv(gymnasium.Env):
    """Round envs that differ only in their load or workload; each episode runs on the next
    in turn.

    The envs share spaces, so a policy trains on a mix of loads (an experiment's
    ``train_loads``) and of workloads (``train_jobs``: the synthetic one and replayed days
    of a jobs table) without knowing which.  A seeded reset with seed ``s`` seeds every
    env (from :class:`numpy.random.SeedSequence` children of ``s``) and runs on env
    ``s % len(envs)``; each later episode runs on the next env in turn.  The same seed
    gives the same sequence of episodes, and envs reset with different seeds (such as the
    groups of :class:`mara_agents.training.group.GroupedEnvRunner`) spread over the mix.
    :meth:`render` draws the env of the episode under way (its load and workload in the
    header).
    """

    metadata = RoundEnv.metadata

    def __init__(self, envs: list[RoundEnv]) -> None:
        if not envs:
            raise ValueError("MixedRoundEnv: expected at least one env")
        self.envs = envs
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        for env in envs[1:]:
            if (env.observation_space, env.action_space) != (
                self.observation_space,
                self.action_space,
            ):
                raise ValueError(
                    "MixedRoundEnv: the envs' spaces differ (expected the same num_nodes and "
                    f"num_slots): {env.observation_space} against {self.observation_space}"
                )
        self.loads = [e.engine.config.load for e in envs]
        self.workloads = [e.engine.config.jobs for e in envs]
        modes = {e.render_mode for e in envs}
        if len(modes) > 1:
            raise ValueError(f"MixedRoundEnv: the envs' render modes differ: {modes}")
        self.render_mode = modes.pop()
        self._next = 0
        self.current = envs[0]

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            self.current = self.envs[self._next]
            self._next = (self._next + 1) % len(self.envs)
            return self.current.reset(options=options)
        children = np.random.SeedSequence(seed).generate_state(len(self.envs))
        for env, child in zip(self.envs, children):  # each continues from here on its turn
            env.reset(seed=int(child), options=options)
        first = seed % len(self.envs)
        self.current, self._next = self.envs[first], (first + 1) % len(self.envs)
        return self.current.observe(), {WORKLOAD_SEED: seed}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        return self.current.step(action)

    def render(self) -> str | None:
        frame = self.current.render()
        if frame is None:
            return None
        config = self.current.engine.config
        workload = f"jobs {config.jobs}" if config.jobs else "synthetic"
        return f"load {config.load:g}, {workload}\n{frame}"
