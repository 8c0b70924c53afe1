"""Agent-steps per second of the MARA env vs PettingZoo's connect_four_v3.

How to run:   python benchmarks/env_speed.py [--steps 20000] [--repeats 5] [--traces FILE]
(connect_four needs ``pip install pygame``; ``make bench`` installs it.)

Both envs run under the same driver loop (``agent_iter`` + ``last`` + a uniformly
random *valid* action from the mask), each as its ``env()`` builds it (connect_four in
PettingZoo's standard wrappers, MARA in its subclasses of them), and reset whenever an
episode ends.  The repeats alternate between the two envs and are timed in CPU time of
this process, so that other load on a shared machine hits both alike; prints the median
steps/s of each, the ratio of the medians and the range of the per-repeat ratios.

Results to expect: a ratio of about 2.5 (2 CPU cores, Python 3.11, numpy 2.4,
PettingZoo 1.27); it was 1.3-1.8 before the per-step path was made cheaper.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from pettingzoo.classic import connect_four_v3

from mara_env import env as mara_env_fn


def drive(env, steps: int, seed: int = 0) -> float:
    """Agent-steps per CPU second over ``steps`` steps of random masked play."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    done = 0
    start = time.process_time()
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
    return done / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="agent-steps per env and run")
    parser.add_argument("--traces", default=None, help="trace library (default: shipped)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per env (median reported)")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error(f"--steps {args.steps} / --repeats {args.repeats}: expected positive integers")
    mara = mara_env_fn(num_nodes=16, num_slots=8, traces=args.traces)
    c4 = connect_four_v3.env()
    drive(mara, 1000)  # warm-up: trace library loaded, caches filled
    drive(c4, 1000)
    ours, theirs = [], []
    for r in range(args.repeats):
        ours.append(drive(mara, args.steps, seed=r))
        theirs.append(drive(c4, args.steps, seed=r))
    ratios = [a / b for a, b in zip(ours, theirs)]
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"mara/ComputeCluster-v3 (16 nodes, 8 slots): {a:>10,.0f} agent-steps/s")
    print(f"connect_four_v3:                            {b:>10,.0f} agent-steps/s")
    print(f"ratio: {a / b:.2f}x (per repeat {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
