"""Evaluate schedulers (and learned policies) on the same episodes at several loads.

Writes OUT/results.csv (one row per scheduler x load x episode, with tasks and
completions per trace family), OUT/summary.md (mean ± 95% CI per scheduler and load,
paired differences vs LARA, both also per trace family), OUT/completion_vs_load.png,
OUT/completion_by_family.png and TensorBoard scalars under OUT/tb.

Example:
  mara evaluate --schedulers lara,edf,uniform,random,oracle --loads 1.0,1.5,2.0 \\
      --episodes 30 --split test --out runs/eval
  PYTHONPATH=examples mara evaluate --schedulers my_scheduler.LeastAttained,lara --out runs/mine
"""

from __future__ import annotations

import argparse
import sys


def parse_list(text: str, cast: type = str) -> list:
    """Comma-separated list, empty items dropped."""
    return [cast(x.strip()) for x in text.split(",") if x.strip()]


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``mara simulate``: trace library, split and cluster size."""
    parser.add_argument(
        "--traces", default=None, help="trace library file (default: the shipped library)"
    )
    parser.add_argument(
        "--split", default="test", help="trace split: train, val, test or all (held-out: test)"
    )
    parser.add_argument("--nodes", type=int, default=16, help="number of compute nodes N")
    parser.add_argument("--horizon", type=int, default=120, help="ticks during which tasks arrive")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schedulers",
        default="lara,edf,uniform,least_slack,random,oracle",
        help="comma-separated specs: NAME[:key=value...] (a built-in scheduler, or your "
        "own as package.module.Class, importable from PYTHONPATH) or PREFIX=ARG (an "
        "env-driven agent, e.g. mara=POLICY.pt); see docs/baselines.md",
    )
    parser.add_argument("--loads", default="1.0,1.5,2.0", help="comma-separated load factors")
    parser.add_argument("--episodes", type=int, default=30, help="episodes per load and seed")
    parser.add_argument(
        "--seeds", default="0", help="comma-separated base seeds (episodes run for each)"
    )
    add_cluster_arguments(parser)
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all CPU cores)"
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--address",
        default=None,
        help="run episodes on this Ray cluster ('auto' or HOST:PORT of `ray start --head`)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from mara_agents.registry import SpecError
    from mara_agents.report import summary_markdown
    from mara_agents.runner import evaluate
    from mara_env.config import ClusterConfig, ConfigError
    from mara_env.traces import TraceError

    try:
        config = ClusterConfig(
            traces=args.traces, split=args.split, num_nodes=args.nodes, horizon=args.horizon
        )
        df = evaluate(
            parse_list(args.schedulers),
            parse_list(args.loads, float),
            args.episodes,
            parse_list(args.seeds, int),
            config,
            workers=args.workers,
            address=args.address,
            out_dir=args.out,
            progress=not args.no_progress,
        )
    except (SpecError, ConfigError, TraceError, ValueError) as exc:
        print(f"mara evaluate: error: {exc}", file=sys.stderr)
        return 2
    print(summary_markdown(df))
    print(f"wrote {args.out}/results.csv, summary.md, completion_vs_load.png, tb/")
    return 0
