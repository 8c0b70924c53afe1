"""Reproduce the headline results with the shipped predictor and policy.

Evaluates the flow-matching predictor against WLS and Optimus on the test split, then
MARA against its teacher, LARA and the other baselines at loads 1.0/1.5/2.0 on the same
episodes (env v3's default padded deadlines), then on replayed test days of a cluster's
job trace (--jobs, the shipped Philly trace by default), and writes OUT/summary.md, CSVs,
plots (completion vs load, predictor error vs prefix fraction, an example episode's
allocation) and TensorBoard logs (docs/reproduce.md says how long it takes: about 8
minutes on 2 cores).  --all runs every table of docs/results.md instead: all 24
schedulers, and twelve of them also under the unbiased and blind deadline models (about
30 minutes on 2 cores).  --full first retrains the predictor and the shipped policy's recipe
from the experiment YAMLs (behaviour cloning of the hedge planner, a PPO stage, DAgger
stages; hours on 2 cores; needs the rllib extra; resumable stage by stage) and evaluates
the retrained policy too.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mara_agents.commands import checks
    from mara_agents.reproduce import (
        ALL_SPECS,
        DEFAULT_EPISODES,
        DEFAULT_JOBS,
        DEFAULT_JOBS_EPISODES,
        DEFAULT_JOBS_NODES,
        DEFAULT_LOADS,
        DEFAULT_SPECS,
        REPLAY_LOADS,
    )

    parser.add_argument(
        "--out", default="results", help="output directory: new or empty (or --resume, --force)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the reproduce run in OUT: with --full its finished retraining stages "
        "are reused; the evaluations run again and replace their files",
    )
    checks.add_force_argument(parser)
    parser.add_argument(
        "--episodes",
        type=int,
        default=DEFAULT_EPISODES,
        help=f"test episodes per load and seed (default {DEFAULT_EPISODES})",
    )
    parser.add_argument(
        "--loads",
        default=",".join(map(str, DEFAULT_LOADS)),
        help="load factors, comma-separated with no empty item (e.g. 1.0,1.5,2.0)",
    )
    parser.add_argument(
        "--seeds", default="0", help="base seeds, comma-separated with no empty item"
    )
    parser.add_argument(
        "--schedulers",
        default=None,
        help="comma-separated specs ('mara' = the shipped policy, paired against by "
        "summary.md; 'bound' = the clairvoyant upper bound); default: the headline's "
        f"{len(DEFAULT_SPECS)} ({','.join(DEFAULT_SPECS)}), with --all all {len(ALL_SPECS)} "
        "of docs/results.md",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every table of docs/results.md: all its schedulers (unless --schedulers), and "
        "the deadline-model table (twelve of them under the unbiased and blind deadline "
        "models too, on the same seeds); about 30 minutes on 2 cores",
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
    parser.add_argument(
        "--jobs",
        default=DEFAULT_JOBS,
        help=f"job trace whose test days the schedulers also replay (default {DEFAULT_JOBS!r}, "
        "the shipped Philly trace; a table from `mara jobs import`; 'none': skip), at loads "
        f"{', '.join(map(str, REPLAY_LOADS))} (docs/jobs.md)",
    )
    parser.add_argument(
        "--jobs-nodes",
        type=int,
        default=DEFAULT_JOBS_NODES,
        help=f"cluster size of the replayed days (default {DEFAULT_JOBS_NODES})",
    )
    parser.add_argument(
        "--jobs-episodes",
        type=int,
        default=DEFAULT_JOBS_EPISODES,
        help=f"replayed episodes per load (default {DEFAULT_JOBS_EPISODES})",
    )


def run(args: argparse.Namespace) -> int:
    from mara_agents.commands import checks
    from mara_agents.evaluation.registry import (
        SpecError,
        check_distinct,
        check_spec,
        expand_alias,
    )
    from mara_agents.outputs import OutputError, prepare_out
    from mara_agents.reproduce import ALL_SPECS, DEFAULT_SPECS, reproduce
    from mara_env.config import ClusterConfig, ConfigError

    try:
        if args.schedulers is None:
            args.schedulers = ",".join(ALL_SPECS if args.all else DEFAULT_SPECS)
        specs, loads, seeds = checks.run_lists(args)
        for spec in specs:  # before the predictor's evaluation, the first step
            check_spec(expand_alias(spec))
        check_distinct(specs)
        for load in loads:
            ClusterConfig(load=load)  # (0, 100], finite: one message naming the value
        jobs = None if args.jobs == "none" else args.jobs
        if jobs is not None:
            checks.at_least(args.jobs_nodes, "--jobs-nodes", 1)
            checks.at_least(args.jobs_episodes, "--jobs-episodes", 1)
            try:
                ClusterConfig(jobs=jobs, num_nodes=args.jobs_nodes)
            except ConfigError as e:
                raise checks.UsageError(f"--jobs {args.jobs}: {e}") from None
        run_dir = prepare_out(
            args.out,
            command="reproduce",
            force=args.force,
            resume=args.resume,
            resumable=True,
            files=("summary.md", "deadline_models.md", "*.png"),
            dirs=("predictor", "schedulers", "deadline_models", "replayed", "retrained"),
        )
        with run_dir:
            if run_dir.resumed:  # the evaluations run again: only the retraining is reused
                run_dir.clear(keep=("retrained",))
            summary = reproduce(
                out=args.out,
                episodes=args.episodes,
                loads=loads,
                seeds=seeds,
                specs=specs,
                workers=args.workers,
                full=args.full,
                skip_predictor=args.skip_predictor,
                jobs=jobs,
                jobs_nodes=args.jobs_nodes,
                jobs_episodes=args.jobs_episodes,
                deadline_models=args.all,
            )
    except (ConfigError, checks.UsageError, OutputError, SpecError) as e:
        print(f"mara reproduce: {e}", file=sys.stderr)
        return 2
    print("\n" + summary)
    return 0
