"""Seconds per episode of the clairvoyant bound (``mara_agents.evaluation.bound``) by load.

How to run:   python benchmarks/bound_speed.py [--loads 1.0,1.5,2.0] [--episodes 5]
                  [--time-limit 5] [--check 120] [--split val] [--traces FILE]
Solves the bound of the harness's episodes (base seed 0, 16 nodes) one after another, in
this process, without the on-disk cache, and prints per load the mean, median and largest
wall time, how many solves were proven optimal and the mean bound on the completion rate.
``--check S`` solves every episode again with a limit of ``S`` seconds and counts those
whose bound did not change (how much the shorter limit costs in tightness).
Wall-clock figures: they depend on the machine and on what else it runs.
"""

from __future__ import annotations

import argparse
import statistics

from mara_agents.evaluation.bound import DEFAULT_TIME_LIMIT, episode_bound
from mara_agents.evaluation.runner import episode_seed
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces


def main() -> None:
    """Parse the arguments and print one line per load."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--loads", default="1.0,1.5,2.0", help="load factors (default 1.0,1.5,2.0)")
    p.add_argument("--episodes", type=int, default=5, help="episodes per load (default 5)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT,
        help=f"seconds per solve (default {DEFAULT_TIME_LIMIT:g})",
    )
    p.add_argument(
        "--check", type=float, default=None, help="also re-solve with this limit and compare"
    )
    p.add_argument("--split", default="val", help="trace split of the episodes (default val)")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    args = p.parse_args()
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    traces = load_traces(args.traces, split=args.split)
    print(
        f"{args.episodes} {args.split} episodes per load, 16 nodes, time limit "
        f"{args.time_limit:g} s, one process:"
    )
    for load in (float(v) for v in args.loads.split(",")):
        config = ClusterConfig(split=args.split, traces=args.traces, load=load)
        seeds = [episode_seed(0, load, i) for i in range(args.episodes)]
        runs = [episode_bound(config, traces, s, args.time_limit, cache_dir="") for s in seeds]
        secs = [r.seconds for r in runs]
        line = (
            f"  load {load:g}: mean {statistics.mean(secs):.2f} s, median "
            f"{statistics.median(secs):.2f} s, max {max(secs):.2f} s per episode; "
            f"{sum(r.status == 'optimal' for r in runs)}/{len(runs)} optimal; bound on the "
            f"completion rate {statistics.mean(r.completion_rate for r in runs):.3f} "
            f"({statistics.mean(r.tasks for r in runs):.0f} tasks/episode)"
        )
        if args.check is not None:
            again = [episode_bound(config, traces, s, args.check, cache_dir="") for s in seeds]
            same = sum(a.completed_bound == b.completed_bound for a, b in zip(runs, again))
            line += (
                f"; with {args.check:g} s: same bound in {same}/{len(runs)} "
                f"({sum(r.status == 'optimal' for r in again)} optimal, mean "
                f"{statistics.mean(r.seconds for r in again):.2f} s)"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
