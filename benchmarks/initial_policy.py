"""How a fresh (untrained) round-level policy schedules, by ``stay_bias``: the start of PPO.

How to run::

    python benchmarks/initial_policy.py [--episodes 8] [--biases 0,2,4,6] [--split val]

Each row: a freshly initialised :class:`~mara_agents.training.rl_module.MaraRoundModule` (seed 0,
``experiments/mara_scratch.yaml``'s model, no predictor features) sampling its actions, on
the same episodes (16 nodes, the YAML's slots, load 1.0), decoded round by round for all episodes
at once.  ``stay`` is the fraction of decisions of nodes that had a visible task in which
the node stayed on it.  Results to expect: see docs/training.md ("Round-level training").
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from mara_agents.policy.rounds import decode
from mara_agents.training.experiment import load_experiment
from mara_agents.training.rl_module import MaraRoundModule
from mara_env.round_env import RoundEnv


def run(biases: list[float], episodes: int, split: str, load: float, seed: int = 0) -> None:
    exp = load_experiment("experiments/mara_scratch.yaml")
    cluster = {**exp.env_config()["cluster"], "split": split, "load": load}
    envs = [RoundEnv(**cluster) for _ in range(episodes)]
    for bias in biases:
        torch.manual_seed(seed)
        module = MaraRoundModule(
            observation_space=envs[0].observation_space,
            action_space=envs[0].action_space,
            model_config={**exp.model, "stay_bias": bias},
        )
        gen = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        obs = [e.reset(seed=1000 + i)[0] for i, e in enumerate(envs)]
        live = list(range(episodes))
        metrics: dict[int, dict] = {}
        stayed = served = 0
        while live:
            batch = {k: torch.as_tensor(np.stack([obs[i][k] for i in live])) for k in obs[0]}
            with torch.no_grad():
                actions, _, _ = decode(module.net, batch, greedy=False, generator=gen)
            mine = batch["node_slot"] >= 0
            stayed += int((actions == batch["node_slot"])[mine].sum())
            served += int(mine.sum())
            for row, i in enumerate(list(live)):
                obs[i], _, term, trunc, info = envs[i].step(actions[row].numpy())
                if term or trunc:
                    metrics[i] = info["episode"]
                    live.remove(i)
        rate = [metrics[i]["completion_rate"] for i in range(episodes)]
        moves = np.mean([metrics[i]["reassignments"] for i in range(episodes)])
        print(
            f"stay_bias {bias:>4}: completion {np.mean(rate):.3f} +- "
            f"{1.96 * np.std(rate, ddof=1) / np.sqrt(episodes):.3f}  stay {stayed / served:.2f}  "
            f"re-assignments/episode {moves:,.0f}  ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--biases", default="0,2,4,6", help="stay_bias values, comma-separated")
    p.add_argument("--split", default="val")
    p.add_argument("--load", type=float, default=1.0)
    args = p.parse_args()
    if args.episodes < 2:
        p.error(f"--episodes {args.episodes}: expected an integer >= 2")
    torch.set_num_threads(1)
    run([float(b) for b in args.biases.split(",")], args.episodes, args.split, args.load)


if __name__ == "__main__":
    main()
