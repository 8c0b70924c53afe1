"""Deadline calibration: uniform share's completion rate for several slack ranges.

Each deadline model's default slack (``mara_env.config.DEADLINE_MODELS``) is chosen so that at
the training load uniform share completes about what it did under env v2's rule (0.883 on the
validation split).  Prints, per slack range, the completion rate (mean and 95 % CI over
episodes) and the correlation between log task size and log(deadline - arrival).

    python benchmarks/calibrate_deadlines.py --episodes 100 --split val --model padded
"""

from __future__ import annotations

import argparse

import numpy as np

from mara_env.config import ClusterConfig
from mara_env.schedulers import Uniform, run_episode
from mara_env.traces import load_traces
from mara_env.workload import sample_workload


def size_deadline_correlation(config: ClusterConfig, traces, seeds: range) -> float:
    """Pearson correlation of log T_k and log(d_k - a_k) over the tasks of ``seeds``."""
    size, window = [], []
    for seed in seeds:
        wl = sample_workload(config, traces, np.random.default_rng(seed))
        size.append(np.log(wl.size))
        window.append(np.log(wl.deadline - wl.arrival))
    return float(np.corrcoef(np.concatenate(size), np.concatenate(window))[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per slack range")
    parser.add_argument("--split", default="val", help="trace split (default: val)")
    parser.add_argument("--load", type=float, default=1.0, help="load factor (default: 1.0)")
    parser.add_argument(
        "--model", default="padded", help="deadline_model: padded, unbiased or blind"
    )
    parser.add_argument(
        "--slack",
        default="1.1-2.0,1.3-2.4,1.5-2.5,1.5-3.0,2.0-3.0",
        help="comma-separated slack ranges LOW-HIGH to try",
    )
    args = parser.parse_args()
    traces = load_traces(split=args.split)
    seeds = range(10_000, 10_000 + args.episodes)
    print(f"split={args.split} load={args.load} deadline_model={args.model}, {args.episodes} ep")
    print("slack_range   uniform completion (95% CI)   corr(log size, log window)")
    for part in args.slack.split(","):
        lo, hi = (float(v) for v in part.split("-"))
        config = ClusterConfig(
            load=args.load, split=args.split, slack_range=(lo, hi), deadline_model=args.model
        )
        rates = np.array(
            [run_episode(Uniform(), config, traces, s)["completion_rate"] for s in seeds]
        )
        half = 1.96 * rates.std(ddof=1) / np.sqrt(len(rates))
        corr = size_deadline_correlation(config, traces, seeds)
        print(f"{lo:.2f}-{hi:.2f}     {rates.mean():.3f} ± {half:.3f}                 {corr:.2f}")


if __name__ == "__main__":
    main()
