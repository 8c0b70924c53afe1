"""An opt-in view of the parallel cluster env for standard simultaneous-choice MARL
algorithms (MAPPO, IPPO, VDN, QMIX): :class:`StayWrapper` and :func:`parallel_env`.

The registered env stays as it is; this wrapper changes only what an action means.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from mara_env.cluster_env import InvalidActionError, parallel_raw_env


class StayWrapper(BaseParallelWrapper):
    """The parallel cluster env with a *stay* action, a conflict rule that idles no node
    that lost a race, and an optional decision interval of several ticks.

    In the parallel env (:class:`mara_env.cluster_env.parallel_raw_env`) every node
    chooses a slot from the round's start; staying on one's task means picking the slot
    that holds it, whose index moves as tasks arrive and leave, and a choice that finds
    its task's cap filled by lower-numbered nodes is wasted (the node idles).  A policy
    that samples its actions therefore moves nodes between tasks (each move costs a
    warm-up tick of no work) and a greedy one sends nodes with the same view to the same
    slot.  Here:

    **Construction** ``StayWrapper(env, interval=1)`` over the parallel env
    (``mara_env.parallel_env(...)``); ``mara_env.marl.parallel_env(interval, **config)``
    builds both.

    **Action space** ``Discrete(K + 2)``: ``0 … K-1`` joins the task in that slot and
    ``K`` idles, as in the env; ``K + 1`` *stays*: keeps serving the task the node served
    in the last tick.  Choosing the slot of one's own task is the same as staying.

    **Observation space** the env's ``Dict`` with the same ``observation`` and ``state``
    (``is_mine`` marks a node's own slot) and ``action_mask`` ``Box(0, 1, (K + 2,),
    int8)``: the env's mask (slots that hold a task; idle) followed by the stay bit, 1
    when the node served a task in the last tick and that task is in a visible slot.

    **Conflict rule** (one round; replaces the env's rule "in node order; a choice past
    the cap idles"):

    1. Every node that stays keeps its task (they always fit: a task's nodes of the last
       tick are within its cap).
    2. The other nodes' joins are then granted in node order while the slot has room.
       A node whose slot is full is *bumped*: it stays on its own task if that has room,
       else it takes the first slot after the asked one (in slot order, wrapping round)
       that has room, else it idles.  Its ``infos`` entry holds ``bumped`` (the slot it
       asked for) and ``granted`` (the env action it got: a slot, or ``K`` for idle).
       :meth:`resolve` applies the rule without stepping.

    A masked-out action (an empty slot, or stay without a visible task) counts as idle and
    is reported in ``infos`` (``masked_action``, ``masked_actions_total``), as in the env;
    with the env's ``strict=True`` it raises :class:`~mara_env.engine.InvalidActionError`,
    as does an action outside ``Discrete(K + 2)``.

    **Decision interval** ``interval`` ticks per step (default 1): the round's actions
    serve the first tick, then every node stays on its task for the other
    ``interval - 1`` (a node whose task left idles until the next step).  The step ends
    early when the episode does.

    **Reward** the team reward of the env summed over the step's ticks: with gamma = 1 an
    episode's return is still its number of completions.  **Termination**, **truncation**,
    ``state()`` and seeds: the env's (``reset(seed=s)`` draws the workload of
    ``mara_env.schedulers.run_episode(..., s)``); the last ``infos`` hold ``episode``.

    **Version history**: v0 — initial release.
    """

    metadata = {
        "name": "mara_compute_cluster_stay_v0",
        "render_modes": ["ansi"],
        "is_parallelizable": True,
    }

    def __init__(self, env: ParallelEnv, interval: int = 1) -> None:
        super().__init__(env)
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            raise ValueError(f"StayWrapper interval={interval!r}: expected a positive integer")
        self.interval = interval
        self.engine = env.unwrapped.engine
        self.possible_agents = list(env.possible_agents)
        self.agents: list[str] = []
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        k = self.engine.config.num_slots
        self.idle, self.stay = k, k + 1
        base = env.observation_space(self.possible_agents[0])
        mask = spaces.Box(0, 1, (k + 2,), np.int8)
        self._obs_space = spaces.Dict({**base.spaces, "action_mask": mask})
        self._act_space = spaces.Discrete(k + 2)
        self.state_space = env.state_space

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self._obs_space

    def action_space(self, agent: str) -> gymnasium.Space:
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        self._masked_total = np.zeros(len(self.possible_agents), np.int64)
        return self._observe(observations), infos

    def _observe(self, observations: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
        """The env's observations with the stay bit appended to each mask."""
        _, self._slot = self.engine.node_rows()  # each node's visible slot, -1: none
        stay = (self._slot >= 0).astype(np.int8)
        return {
            a: {**obs, "action_mask": np.append(obs["action_mask"], stay[self._index[a]])}
            for a, obs in observations.items()
        }

    def _check(self, agent: str, action: Any) -> int:
        """``action`` as an int; :class:`InvalidActionError` naming the agent otherwise."""
        try:
            a = int(action)
        except (TypeError, ValueError, OverflowError):
            a = None
        if a is None or a != action or not 0 <= a <= self.stay:
            raise InvalidActionError(
                f"{agent}: action {action!r} is outside the action space Discrete({self.stay + 1})"
            )
        return a

    def resolve(self, actions: dict[str, Any]) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
        """The env action of every node under the conflict rule, and the ``infos`` entries
        of bumped and masked nodes (a node missing from ``actions`` idles); steps nothing."""
        engine, idle, slot = self.engine, self.idle, self._slot
        asked = np.full(len(self.possible_agents), idle, np.int64)
        for agent, action in actions.items():
            asked[self._index[agent]] = self._check(agent, action)
        occupied = engine.slot_tasks >= 0
        room = np.where(occupied, engine.slot_cap, 0)
        stays = (slot >= 0) & ((asked == self.stay) | (asked == slot))
        out = np.where(stays, slot, idle)
        room -= np.bincount(slot[stays], minlength=len(room))
        infos: dict[str, dict[str, Any]] = {}
        for i in np.flatnonzero(~stays & (asked != idle)).tolist():
            agent, a = self.possible_agents[i], int(asked[i])
            if a == self.stay or not occupied[a]:
                if engine.config.strict:
                    why = "it serves no visible task" if a == self.stay else f"slot {a} is empty"
                    raise InvalidActionError(f"{agent}: action {a} is masked out ({why})")
                infos[agent] = {"masked_action": a}
                continue
            granted = a
            if room[a] <= 0:  # lost the race: its own task, else the next slot with room
                if slot[i] >= 0 and room[slot[i]] > 0:
                    granted = int(slot[i])
                else:
                    after = np.flatnonzero(np.roll(room, -(a + 1)) > 0)
                    granted = (a + 1 + int(after[0])) % len(room) if len(after) else idle
                infos[agent] = {"bumped": a, "granted": granted}
            if granted != idle:
                out[i] = granted
                room[granted] -= 1
        return out, infos

    def step(self, actions: dict[str, Any]):
        out, extra = self.resolve(actions)
        for agent, info in extra.items():
            if "masked_action" in info:
                i = self._index[agent]
                self._masked_total[i] += 1
                info["masked_actions_total"] = int(self._masked_total[i])
        total = 0.0
        for _ in range(self.interval):
            observations, rewards, terms, truncs, infos = self.env.step(
                dict(zip(self.possible_agents, out.tolist()))
            )
            total += next(iter(rewards.values()), 0.0)
            if not self.env.agents:
                break
            _, slot = self.engine.node_rows()
            out = np.where(slot >= 0, slot, self.idle)  # every node stays
        rewards = dict.fromkeys(rewards, total)
        infos = {a: {**extra.get(a, {}), **info} for a, info in infos.items()}
        self.agents = list(self.env.agents)
        return self._observe(observations), rewards, terms, truncs, infos


def parallel_env(interval: int = 1, **kwargs: Any) -> StayWrapper:
    """The parallel cluster env (``kwargs``: its config) under :class:`StayWrapper`."""
    return StayWrapper(parallel_raw_env(**kwargs), interval=interval)
