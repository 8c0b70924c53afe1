"""PettingZoo environment: every compute node of the cluster is an agent.

:class:`raw_env` (its docstring is the specification), :func:`env` (wrapped; also
``mara_env.env``), :func:`parallel_env`, the v2 ids' factories and :func:`play_random`.
The round logic and the feature tables are :mod:`mara_env.engine`'s (re-exported here).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers

from mara_env.cluster import ClusterState
from mara_env.config import ClusterConfig
from mara_env.engine import (
    CAP_SCALE,
    LOG_RATIO_LIMIT,
    NODE_FEATURES,
    OBS_LIMIT,
    QUEUE_FEATURES,
    SLOT_FEATURES,
    TICK_SCALE,
    ClusterEngine,
    InvalidActionError,
)
from mara_env.traces import TraceSet

__all__ = [
    "CAP_SCALE",
    "ENV_ID",
    "LOG_RATIO_LIMIT",
    "NODE_FEATURES",
    "OBS_LIMIT",
    "QUEUE_FEATURES",
    "SLOT_FEATURES",
    "TICK_SCALE",
    "V2_ID",
    "ClusterEngine",
    "InvalidActionError",
    "env",
    "env_name",
    "env_v2",
    "parallel_env",
    "parallel_env_v2",
    "parallel_raw_env",
    "play_random",
    "raw_env",
]


# The id the env is registered under (``mara_env`` registers it); bump its version when
# the spaces, the dynamics or the trace library change what an episode means.
ENV_ID = "mara/ComputeCluster-v3"
# Older ids, still registered, and the settings that keep their behaviour.
V2_ID = "mara/ComputeCluster-v2"
V2_DEFAULTS = {"deadline_model": "unbiased"}


def env_name(env_id: str) -> str:
    """The ``metadata["name"]`` of an env id: ``ns/CamelName-vN`` -> ``ns_camel_name_vN``."""
    match = re.fullmatch(r"(\w+)/(\w+)-v(\d+)", env_id)
    if match is None:
        raise ValueError(f"env id {env_id!r}: expected NAMESPACE/Name-vVERSION")
    namespace, name, version = match.groups()
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return f"{namespace}_{snake}_v{version}"


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
