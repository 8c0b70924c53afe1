"""Run one scheduler on the simulator and print its completion rate per episode.

Prints a table (completion rate, utilisation, wasted node-ticks, re-assignments and
expired tasks per episode) and the mean ± 95% CI.  Runs on the simulator's fast path;
imports neither torch nor ray.

Example:  mara simulate --scheduler lara --load 1.5 --episodes 10 --split test
"""

from __future__ import annotations

import argparse
import sys

from mara_agents.commands import checks

COLUMNS = ("completion_rate", "utilisation", "wasted_node_ticks", "reassignments", "expired")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheduler", default="lara", help="scheduler spec NAME[:key=value...], e.g. lara, edf"
    )
    parser.add_argument("--load", type=float, default=1.0, help="load factor rho")
    parser.add_argument("--episodes", type=int, default=5, help="number of episodes")
    parser.add_argument("--seed", type=int, default=0, help="base seed")
    checks.add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from mara_agents.evaluation.registry import SpecError
    from mara_agents.evaluation.runner import evaluate
    from mara_agents.evaluation.stats import mean_ci
    from mara_agents.evaluation.tuning import resolve_history
    from mara_env.config import ConfigError
    from mara_env.traces import TraceError

    try:
        episodes = checks.at_least(args.episodes, "--episodes", 1)
        seed = checks.at_least(args.seed, "--seed", 0)
        config, traces = checks.cluster_from_args(args, [args.load], "--load")
        history = resolve_history(config, [args.scheduler])
        df = evaluate(
            [args.scheduler],
            [args.load],
            episodes,
            [seed],
            config,
            traces=traces,
            workers=1,
            progress=False,
            history=history,
        )
    except (SpecError, ConfigError, TraceError, ValueError) as exc:
        print(f"mara simulate: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.scheduler} at load {args.load:g}, {args.nodes} nodes, split {args.split}")
    header = f"{'episode':>7} {'seed':>10} {'tasks':>5} " + " ".join(f"{c:>17}" for c in COLUMNS)
    print(header)
    for _, r in df.iterrows():
        cells = [f"{r[c]:>17.3f}" if isinstance(r[c], float) else f"{r[c]:>17}" for c in COLUMNS]
        print(f"{r['episode']:>7} {r['seed']:>10} {r['tasks']:>5} " + " ".join(cells))
    means = []
    for c in COLUMNS:
        m, h = mean_ci(df[c].to_numpy(float))
        means.append(f"{m:.3f} ± {h:.3f}" if h == h else f"{m:.3f}")
    print(f"{'mean ± 95% CI':>24} " + " ".join(f"{x:>17}" for x in means))
    return 0
