"""Episodes per second of the evaluation harness for LARA and EDF (load 1.0, 16 nodes).

How to run:   python benchmarks/eval_speed.py [--episodes 20] [--workers 1] [--traces FILE]
Runs ``mara_agents.harness.evaluate`` (the simulator fast path) without writing outputs
and prints episodes/s per scheduler.  Wall-clock figures: they depend on the machine and
on what else it runs.
"""

from __future__ import annotations

import argparse
import time

from mara_agents.harness import evaluate
from mara_env.config import ClusterConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=20, help="episodes per scheduler")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    p.add_argument("--split", default="test", help="trace split")
    args = p.parse_args()
    config = ClusterConfig(traces=args.traces, split=args.split, num_nodes=16)
    for spec in ("lara", "edf"):
        start = time.perf_counter()
        df = evaluate(
            [spec], [1.0], args.episodes, [0], config, workers=args.workers, progress=False
        )
        secs = time.perf_counter() - start
        print(
            f"{spec:>5}: {args.episodes / secs:7.1f} episodes/s "
            f"({secs:.1f} s for {args.episodes}, "
            f"{args.workers} worker(s), mean {df['tasks'].mean():.0f} tasks/episode)"
        )


if __name__ == "__main__":
    main()
