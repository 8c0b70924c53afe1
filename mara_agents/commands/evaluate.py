"""Evaluate schedulers (and learned policies) on the same episodes at several loads.

Writes OUT/results.csv (one row per scheduler x load x episode, with tasks and
completions per trace family), OUT/summary.md (mean ± 95% CI per scheduler and load,
paired differences against a reference, both also per trace family; with `bound` and
`uniform`, the share of the room above uniform share each closes), OUT/completion_vs_load.png,
OUT/completion_by_family.png and TensorBoard scalars under OUT/tb.  --reference picks the
scheduler the paired differences are taken against (by default the shipped policy `mara`
when evaluated, else LARA when evaluated, else the first).

Example:
  mara evaluate --schedulers mara,laira,lara,elasticflow,fifo,tiresias,bound,uniform \\
      --loads 1.0,1.5,2.0 --episodes 100 --split test --out runs/eval
  PYTHONPATH=examples mara evaluate --schedulers my_scheduler.LeastAttained,lara --out runs/mine
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mara_agents.commands import checks

# what a run writes in --out besides tb/ (the pattern: every plot; --force may replace them)
FILES = ("results.csv", "summary.md", "*.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schedulers",
        default="lara,edf,uniform,least_slack,random,oracle",
        help="comma-separated specs: NAME[:key=value...] (a built-in scheduler, or your "
        "own as package.module.Class, importable from PYTHONPATH) or PREFIX=ARG (an "
        "env-driven agent, e.g. mara=POLICY.pt); see docs/baselines.md",
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="the scheduler of --schedulers (as written there) that summary.md's paired "
        "differences are taken against (default: mara when evaluated, else lara when "
        "evaluated, else the first)",
    )
    parser.add_argument(
        "--loads",
        default="1.0,1.5,2.0",
        help="load factors, comma-separated with no empty item (e.g. 1.0,1.5,2.0)",
    )
    parser.add_argument("--episodes", type=int, default=30, help="episodes per load and seed")
    parser.add_argument(
        "--seeds",
        default="0",
        help="base seeds, comma-separated with no empty item (episodes run for each)",
    )
    checks.add_cluster_arguments(parser)
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all CPU cores)"
    )
    parser.add_argument(
        "--out", required=True, help="output directory: new or empty (or --resume, --force)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the evaluation in OUT (stopped, or finished): the episodes it ran are "
        "kept and only those missing run; the options must be those it ran with",
    )
    checks.add_force_argument(parser)
    parser.add_argument(
        "--address",
        default=None,
        help="run episodes on this Ray cluster ('auto' or HOST:PORT of `ray start --head`)",
    )
    parser.add_argument(
        "--history",
        action="append",
        default=[],
        metavar="HISTORY.json",
        help="a tuning of the cluster's price of a miss (`mara history fit --out`); without "
        "one for the --cluster, a spec that needs it has it tuned once, here, first",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def checked_args(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`~mara_agents.evaluation.runner.evaluate`, checked."""
    from mara_agents.evaluation.registry import check_distinct
    from mara_agents.evaluation.report import default_reference

    specs, loads, seeds = checks.run_lists(args)
    check_distinct(specs)
    if args.reference is not None and args.reference not in specs:
        raise checks.UsageError(
            f"--reference: {args.reference!r} is not one of --schedulers {specs}; expected "
            "one of them, written as there"
        )
    if args.address is not None:
        from mara_agents.extras import require

        require("rllib")
        checks.ray_address(args.address)
    config, traces = checks.cluster_from_args(args, loads, "--loads")
    from mara_agents.evaluation.tuning import resolve_history

    history = resolve_history(config, specs, args.history, progress=not args.no_progress)
    return dict(
        specs=specs,
        loads=loads,
        episodes=args.episodes,
        seeds=seeds,
        config=config,
        traces=traces,
        workers=args.workers,
        address=args.address,
        out_dir=args.out,
        progress=not args.no_progress,
        reference=args.reference or default_reference(specs),
        history=history,
    )


def inputs(args: argparse.Namespace, kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """The files the evaluation of :func:`checked_args` ``kwargs`` reads, by option: the
    trace library, the jobs table, the cluster file and the files the specs name (a
    policy, a prior)."""
    from mara_agents.evaluation.registry import spec_files
    from mara_env.job_logs import jobs_path
    from mara_env.traces import SHIPPED_LIBRARY

    config = kwargs["config"]
    files = [("--traces", config.traces or SHIPPED_LIBRARY)]
    if config.jobs is not None:
        files.append(("--jobs", jobs_path(config.jobs)))
    if args.cluster is not None:
        files.append(("--cluster", args.cluster))
    files += [("--schedulers", path) for spec in kwargs["specs"] for path in spec_files(spec)]
    return files


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from mara_agents.evaluation.registry import SpecError
    from mara_agents.evaluation.report import summary_markdown
    from mara_agents.evaluation.runner import PARTIAL, evaluate
    from mara_agents.outputs import INPUTS, input_digests, prepare_out
    from mara_env.config import ConfigError
    from mara_env.traces import TraceError

    try:
        kwargs = checked_args(args)
        settings = {k: kwargs[k] for k in ("specs", "loads", "episodes", "seeds")}
        settings["config"] = dataclasses.asdict(kwargs["config"])
        settings[INPUTS] = input_digests(inputs(args, kwargs))
        run_dir = prepare_out(
            args.out,
            command="evaluate",
            force=args.force,
            resume=args.resume,
            resumable=True,
            files=(*FILES, PARTIAL),
            dirs=("tb",),
            settings=settings,
        )
        with run_dir:
            if run_dir.resumed:  # the reports are written again: only the episodes are kept
                run_dir.clear(keep=(PARTIAL, "results.csv"))
            df = evaluate(**kwargs, resume=run_dir.resumed)
    except (SpecError, ConfigError, TraceError, ValueError) as exc:
        print(f"mara evaluate: error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:  # Ray found no cluster at --address auto
        print(f"mara evaluate: error: --address {args.address}: {exc}", file=sys.stderr)
        return 2
    print(summary_markdown(df, kwargs["reference"]))
    print(f"wrote {args.out}/results.csv, summary.md, completion_vs_load.png, tb/")
    return 0
