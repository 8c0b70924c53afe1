"""Tune LARA's free parameters on the validation split (a small grid).

How to run:   python benchmarks/tune_lara.py [--episodes 20] [--loads 1.0,2.0] [--workers 1]
Every grid point sees the same episodes (common random numbers).  Prints one row per
grid point (mean completion rate per load and overall), best first; the best point's
values are the defaults in ``mara_agents/baselines.py`` (see docs/baselines.md).
"""

from __future__ import annotations

import argparse
import itertools
import time

from mara_agents.evaluation.runner import evaluate
from mara_env.config import ClusterConfig

# margin < 0 shrinks the predicted remaining work (WLS from few noisy reports
# overestimates it, see docs/baselines.md), margin > 0 inflates it.
GRID = {
    "discount": (0.8, 0.9, 0.97),
    "ridge": (0.001, 0.1),
    "explore_reports": (3, 6, 12, 20),
    "margin": (-0.6, -0.3, 0.0, 0.2),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=20, help="episodes per load and grid point")
    p.add_argument("--loads", default="1.0,2.0", help="comma-separated load factors")
    p.add_argument("--split", default="val", help="trace split to tune on")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    p.add_argument("--seed", type=int, default=1000, help="base seed (not the test seeds)")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    args = p.parse_args()

    specs = [
        "lara:" + ":".join(f"{k}={v}" for k, v in zip(GRID, values))
        for values in itertools.product(*GRID.values())
    ]
    loads = [float(x) for x in args.loads.split(",")]
    config = ClusterConfig(traces=args.traces, split=args.split)
    start = time.perf_counter()
    df = evaluate(specs, loads, args.episodes, [args.seed], config, workers=args.workers)
    table = df.pivot_table(index="scheduler", columns="load", values="completion_rate")
    table["mean"] = table.mean(axis=1)
    table = table.sort_values("mean", ascending=False)
    print(
        f"{len(specs)} grid points x {len(loads)} loads x {args.episodes} episodes "
        f"on split {args.split!r} in {time.perf_counter() - start:.0f} s"
    )
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
