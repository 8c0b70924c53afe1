"""Hand-written rules played through the opt-in ``mara_env.marl.StayWrapper``: what a
policy of that action space can reach, next to what MAPPO learns there.

Three rules, each a function of one round's observations (every node chooses at once):

* ``stay_first``: a node that serves a visible task stays; a free node asks for the
  first occupied slot (the earliest deadline) and the conflict rule spills it onward.
  Two branches of one feature (``task_visible``) and a constant: the kind of policy an
  MLP reaches first.
* ``stay_fewest``: the same, but a free node asks for the occupied slot whose task has
  the fewest nodes (``nodes_now * cap``), reading only its own observation.
* ``uniform_through_stay``: uniform share expressed in the opt-in's actions.  It is not
  a node's policy: it reads the whole cluster (``engine.node_rows()``, the slots' caps),
  water-fills the N nodes over the visible tasks in slot order up to their caps, keeps
  nodes where their task is within its share and sends the rest to the tasks short of
  theirs.  It shows that the action space can carry uniform share's allocation.

Evaluation: the val episodes with the seeds of ``mara evaluate --split val --seeds S``
(``--eval-seed S``), next to EDF and uniform share on the same seeds, paired.

How to run
----------
    python examples/stay_rules.py
    python examples/stay_rules.py --help

Results to expect (N=16, K=32, load 1, 100 val episodes, seeds ``episode_seed(0, 1.0, i)``;
completion, then paired minus EDF, each ± its 95% half-width):

    stay_first             0.745 ± 0.021   -0.021 ± 0.014
    stay_fewest            0.762 ± 0.018   -0.003 ± 0.016
    uniform_through_stay   0.813 ± 0.014   +0.048 ± 0.015
    edf                    0.765 ± 0.022
    uniform                0.813 ± 0.014
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mara_agents.evaluation.references import (
    completion_summary,
    env_kwargs,
    episode_figures,
    episode_seeds,
    paired_leads,
    reference_episodes,
)
from mara_env import marl
from mara_env.engine import _NODE, _SLOT, NODE_FEATURES, SLOT_FEATURES
from mara_env.schedulers import spread

Rule = Callable[[marl.StayWrapper, dict[str, dict[str, np.ndarray]]], dict[str, int]]


def _stay_else(
    env: marl.StayWrapper,
    observations: dict[str, dict[str, np.ndarray]],
    pick: Callable[[np.ndarray, np.ndarray], int],
) -> dict[str, int]:
    """Each node stays on a visible task; a free one asks for ``pick(occupied, table)``
    of the occupied slots and its slot table ``(K, len(SLOT_FEATURES))``, else idles."""
    k = env.idle
    acts = {}
    for agent, obs in observations.items():
        occupied = np.flatnonzero(obs["action_mask"][:k])
        if obs["observation"][_NODE["task_visible"]] > 0:
            acts[agent] = env.stay
        elif len(occupied):
            table = obs["observation"][len(NODE_FEATURES) :].reshape(k, len(SLOT_FEATURES))
            acts[agent] = int(pick(occupied, table))
        else:
            acts[agent] = env.idle
    return acts


def stay_first(env: marl.StayWrapper, observations: dict[str, dict[str, np.ndarray]]):
    """Stay on a visible task; otherwise ask for the first occupied slot (else idle)."""
    return _stay_else(env, observations, lambda occupied, table: occupied[0])


def _fewest_nodes(occupied: np.ndarray, table: np.ndarray) -> int:
    """The occupied slot whose task has the fewest nodes (``nodes_now * cap``)."""
    rows = table[occupied]
    return occupied[np.argmin(rows[:, _SLOT["nodes_now"]] * rows[:, _SLOT["cap"]])]


def stay_fewest(env: marl.StayWrapper, observations: dict[str, dict[str, np.ndarray]]):
    """Stay on a visible task; otherwise ask for the occupied slot with the fewest nodes."""
    return _stay_else(env, observations, _fewest_nodes)


def uniform_through_stay(env: marl.StayWrapper, observations: dict[str, dict[str, np.ndarray]]):
    """Uniform share's allocation in the opt-in's actions (reads the whole cluster)."""
    engine = env.engine
    _, slot = engine.node_rows()
    occupied = np.flatnonzero(engine.slot_tasks >= 0)
    share = np.zeros(len(engine.slot_tasks), np.int64)
    visible = np.zeros(len(occupied), np.int64)  # the nodes, round-robin in slot order
    spread(visible, engine.slot_cap[occupied], len(slot))
    share[occupied] = visible
    kept = np.zeros(len(share), np.int64)
    acts, movers = {}, []
    for i, agent in enumerate(env.possible_agents):
        s = slot[i]
        if s >= 0 and kept[s] < share[s]:
            kept[s] += 1
            acts[agent] = env.stay
        else:
            movers.append((i, agent))
    short = share - kept
    for i, agent in movers:
        open_ = np.flatnonzero(short > 0)
        if len(open_):
            acts[agent] = int(open_[0])
            short[open_[0]] -= 1
        else:
            acts[agent] = env.stay if slot[i] >= 0 else env.idle
    return {a: acts[a] for a in observations}


RULES: dict[str, Rule] = {
    "stay_first": stay_first,
    "stay_fewest": stay_fewest,
    "uniform_through_stay": uniform_through_stay,
}


@dataclass(frozen=True)
class Settings:
    """The env and evaluation settings (the command line's options)."""

    nodes: int = 16
    slots: int = 32
    load: float = 1.0
    horizon: int = 120
    episodes: int = 100
    eval_seed: int = 0
    split: str = "val"


def play(rule: Rule, settings: Settings, seed: int) -> dict[str, float]:
    """:func:`episode_figures` of one episode of ``rule`` through the opt-in."""
    env = marl.parallel_env(**env_kwargs(settings, settings.split))
    observations, _ = env.reset(seed=seed)
    bumped = 0
    while env.agents:
        observations, _, _, _, infos = env.step(rule(env, observations))
        bumped += sum("bumped" in info for info in infos.values())
    return episode_figures(env.unwrapped.engine.sim.metrics(), bumped=bumped)


def run(settings: Settings) -> dict[str, Any]:
    """Every rule and the reference schedulers on the same seeds; their figures and each
    rule's paired lead over random, EDF and uniform share."""
    seeds = episode_seeds(settings.eval_seed, settings.load, settings.episodes)
    episodes = {name: [play(rule, settings, s) for s in seeds] for name, rule in RULES.items()}
    episodes.update(reference_episodes(env_kwargs(settings, settings.split), seeds))
    result = completion_summary(episodes)
    for name in RULES:
        result.update(paired_leads(episodes, name))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = Settings()
    p.add_argument("--nodes", type=int, default=defaults.nodes, help="compute nodes N")
    p.add_argument("--slots", type=int, default=defaults.slots, help="visible task slots K")
    p.add_argument("--load", type=float, default=defaults.load, help="load factor rho")
    p.add_argument("--horizon", type=int, default=defaults.horizon, help="ticks with arrivals")
    p.add_argument("--episodes", type=int, default=defaults.episodes, help="episodes per rule")
    p.add_argument(
        "--eval-seed", type=int, default=defaults.eval_seed, help="as `mara evaluate --seeds`"
    )
    p.add_argument("--split", default=defaults.split, help="trace split of the episodes")
    settings = Settings(**vars(p.parse_args(argv)))
    result = run(settings)
    print(
        f"{settings.episodes} episodes of split {settings.split!r} (N={settings.nodes}, "
        f"K={settings.slots}, load={settings.load}): completion, paired minus EDF"
    )
    for name in (*RULES, "edf", "uniform", "random"):
        key = f"{name}_minus_edf"
        lead = f"   {result[key]:+.3f} ± {result[f'{key}_ci95']:.3f}" if name in RULES else ""
        print(f"  {name:<22} {result[name]:.3f} ± {result[f'{name}_ci95']:.3f}{lead}")
    return result


if __name__ == "__main__":
    main()
