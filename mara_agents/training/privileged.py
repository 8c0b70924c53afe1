"""The privileged critic's inputs: what the simulator knows and no scheduler does.

Training only (asymmetric actor-critic, Pinto et al. 2018; MAPPO's state-based critic).
With an experiment's ``critic: {privileged: [...]}`` (round view) each round env is a
:class:`PrivilegedRoundEnv`, whose observation gains two entries that only the critic
reads (:meth:`mara_agents.policy.network.MaraNet.value`); the actor's entries are those of
:class:`~mara_env.round_env.RoundEnv`, unchanged, and a policy file records none of them
(:meth:`~mara_agents.policy.network.MaraNet.without_privileged`):

* :data:`CRITIC_SLOTS` ``(K, S)``, per slot, the :data:`SLOT_FEATURES` named (``S`` of them):
  ``remaining_work``: the task's exact remaining work (``sim.remaining_true``) in the units of
  the predictor wrapper's quantile features (:func:`~flow_predictor.wrapper.work_in_ticks`);
  a task whose trace never reaches its target reads the env's limit
  (``OBS_LIMIT``); an empty slot reads 0;
* :data:`CRITIC_QUEUE` ``(Q,)``, the :data:`QUEUE_FEATURES` named: ``arrivals_ahead``: the
  load of the tasks that arrive in the next :data:`ARRIVAL_TICKS` ticks, their exact work
  in node-ticks on their reference allocations over ``num_nodes * ARRIVAL_TICKS`` (about
  the load factor on average), clipped to the limit.

Numpy only, like the env it extends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from flow_predictor.wrapper import work_in_ticks
from mara_env.engine import OBS_LIMIT
from mara_env.round_env import RoundEnv
from mara_env.workload import reference_nodes

ARRIVAL_TICKS = 4  # the ticks ahead that arrivals_ahead sums
# the observation entries the critic reads and the actor does not
CRITIC_SLOTS, CRITIC_QUEUE = "critic_slots", "critic_queue"


def privileged_widths(space: spaces.Dict) -> tuple[int, int]:
    """The privileged columns ``(per slot, queue)`` of a round observation space ((0, 0):
    a plain :class:`RoundEnv`'s)."""
    if CRITIC_SLOTS not in space.spaces:
        return 0, 0
    return space[CRITIC_SLOTS].shape[1], space[CRITIC_QUEUE].shape[0]


def critic_inputs(obs: dict[str, Any]) -> tuple[Any, Any] | None:
    """The privileged entries ``(slots, queue)`` of a round observation (batch), or None."""
    if CRITIC_SLOTS not in obs:
        return None
    return obs[CRITIC_SLOTS], obs[CRITIC_QUEUE]


def remaining_work(sim: Any, tasks: np.ndarray) -> np.ndarray:
    """``remaining_work`` of ``tasks`` (see the module doc), float32."""
    wl = sim.workload
    ref = wl.rate[tasks] * reference_nodes(wl, sim.config, tasks) ** wl.alpha[tasks]
    # a target never reached: inf, clipped below
    value = work_in_ticks(np.asarray(sim.remaining_true(tasks), np.float64), ref)
    return np.minimum(value, OBS_LIMIT).astype(np.float32)


def arrivals_ahead(sim: Any) -> float:
    """``arrivals_ahead`` of the simulation's current tick (see the module doc)."""
    truth = sim.truth
    first, end = np.searchsorted(truth.arrival, [sim.t, sim.t + ARRIVAL_TICKS], side="right")
    tasks = np.arange(first, end)
    n_ref = reference_nodes(truth, sim.config, tasks)
    node_ticks = truth.work_true[tasks] / (truth.rate[tasks] * n_ref ** truth.alpha[tasks]) * n_ref
    load = node_ticks.sum() / (sim.config.num_nodes * ARRIVAL_TICKS)
    return float(min(load, OBS_LIMIT))


# each feature's column: per slot, of the visible tasks; and of the queue
SLOT_COLUMNS = {"remaining_work": remaining_work}
QUEUE_COLUMNS = {"arrivals_ahead": arrivals_ahead}
SLOT_FEATURES, QUEUE_FEATURES = tuple(SLOT_COLUMNS), tuple(QUEUE_COLUMNS)
PRIVILEGED_FEATURES = SLOT_FEATURES + QUEUE_FEATURES


class PrivilegedRoundEnv(RoundEnv):
    """A :class:`RoundEnv` whose observation also holds the privileged ``features`` (names of
    :data:`PRIVILEGED_FEATURES`): :data:`CRITIC_SLOTS` and :data:`CRITIC_QUEUE`."""

    def __init__(self, env: Any, features: tuple[str, ...], render_mode: str | None = None) -> None:
        super().__init__(env, render_mode=render_mode)
        unknown = sorted(set(features) - set(PRIVILEGED_FEATURES))
        if unknown:
            raise ValueError(f"privileged features {unknown}: expected {list(PRIVILEGED_FEATURES)}")
        self.slot_features = tuple(f for f in SLOT_FEATURES if f in features)
        self.queue_features = tuple(f for f in QUEUE_FEATURES if f in features)
        k = self.engine.config.num_slots
        box = spaces.Box
        self.observation_space = spaces.Dict(
            {
                **self.observation_space.spaces,
                CRITIC_SLOTS: box(0.0, OBS_LIMIT, (k, len(self.slot_features)), np.float32),
                CRITIC_QUEUE: box(0.0, OBS_LIMIT, (len(self.queue_features),), np.float32),
            }
        )

    def observe(self) -> dict[str, np.ndarray]:
        obs = super().observe()
        sim, tasks = self.engine.sim, self.engine.slot_tasks
        visible = tasks >= 0
        slots = np.zeros((len(tasks), len(self.slot_features)), np.float32)
        if visible.any():
            for c, name in enumerate(self.slot_features):
                slots[visible, c] = SLOT_COLUMNS[name](sim, tasks[visible])
        queue = np.array([QUEUE_COLUMNS[name](sim) for name in self.queue_features], np.float32)
        return {**obs, CRITIC_SLOTS: slots, CRITIC_QUEUE: queue}
