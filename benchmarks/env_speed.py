"""Agent-steps per second of the MARA env vs PettingZoo's connect_four_v3.

How to run:   python benchmarks/env_speed.py [--steps 50000] [--traces FILE]
Both envs run under the same driver loop (``agent_iter`` + ``last`` + a uniformly
random *valid* action from the mask), wrapped in PettingZoo's standard wrappers, and
reset whenever an episode ends.  Prints steps/s for each and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from pettingzoo.classic import connect_four_v3

from mara_env.cluster_env import env as mara_env_fn


def drive(env, steps: int, seed: int = 0) -> float:
    """Agent-steps per second over ``steps`` steps of random masked play."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    done = 0
    start = time.perf_counter()
    while done < steps:
        for _ in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                action = None
            else:
                action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            env.step(action)
            done += 1
            if done >= steps:
                break
        else:
            env.reset()
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="agent-steps per env")
    parser.add_argument("--traces", default=None, help="trace library (default: shipped)")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    mara = mara_env_fn(num_nodes=16, num_slots=8, traces=args.traces)
    c4 = connect_four_v3.env()
    # Interleave the repeats so that background load hits both envs alike; keep the best.
    ours, theirs = 0.0, 0.0
    for r in range(args.repeats):
        ours = max(ours, drive(mara, args.steps, seed=r))
        theirs = max(theirs, drive(c4, args.steps, seed=r))
    print(f"mara/ComputeCluster-v0 (16 nodes, 8 slots): {ours:>10,.0f} agent-steps/s")
    print(f"connect_four_v3:                            {theirs:>10,.0f} agent-steps/s")
    print(f"ratio: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
