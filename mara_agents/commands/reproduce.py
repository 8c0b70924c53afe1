"""Reproduce the headline results with the shipped predictor and policy.

Evaluates the flow-matching predictor against WLS and Optimus on the test split, then
MARA against LARA and the other baselines at loads 1.0/1.5/2.0 on the same episodes,
and writes OUT/summary.md, CSVs, plots (completion vs load, predictor error vs prefix
fraction, an example episode's allocation) and TensorBoard logs.  About 3-6 minutes on
2 cores.  --full first retrains the predictor and the shipped policy's recipe from the
experiment YAMLs (behaviour cloning, then three PPO stages of 40-45 minutes each; about
two and a half hours more on 2 cores; needs the rllib extra; resumable stage by stage)
and evaluates the retrained policy too.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mara_agents.reproduce import DEFAULT_EPISODES, DEFAULT_LOADS, DEFAULT_SPECS

    parser.add_argument("--out", default="results", help="output directory")
    parser.add_argument(
        "--episodes",
        type=int,
        default=DEFAULT_EPISODES,
        help=f"test episodes per load and seed (default {DEFAULT_EPISODES})",
    )
    parser.add_argument(
        "--loads", default=",".join(map(str, DEFAULT_LOADS)), help="comma-separated load factors"
    )
    parser.add_argument("--seeds", default="0", help="comma-separated base seeds")
    parser.add_argument(
        "--schedulers",
        default=",".join(DEFAULT_SPECS),
        help="comma-separated specs ('mara' = the shipped policy, paired against by "
        "summary.md; 'bound' = the clairvoyant upper bound)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all cores)"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="retrain the predictor and the policy (clone + PPO) first (1-2 hours; resumable)",
    )
    parser.add_argument(
        "--skip-predictor", action="store_true", help="skip the predictor evaluation"
    )


def run(args: argparse.Namespace) -> int:
    from mara_agents.commands import checks
    from mara_agents.reproduce import reproduce
    from mara_env.config import ClusterConfig, ConfigError

    try:
        specs, loads, seeds = checks.run_lists(args)
        for load in loads:
            ClusterConfig(load=load)  # (0, 100], finite: one message naming the value
        checks.check_output_dir(args.out)
        summary = reproduce(
            out=args.out,
            episodes=args.episodes,
            loads=loads,
            seeds=seeds,
            specs=specs,
            workers=args.workers,
            full=args.full,
            skip_predictor=args.skip_predictor,
        )
    except (ConfigError, checks.UsageError) as e:
        print(f"mara reproduce: {e}", file=sys.stderr)
        return 2
    print("\n" + summary)
    return 0
