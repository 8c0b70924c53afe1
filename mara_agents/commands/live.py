"""Schedule real training jobs on a Ray cluster (live mode) and report as `mara evaluate` does.

Every tick is a wall-clock slice of --tick-seconds: each job given n nodes trains
data-parallel on n Ray workers (a fixed global batch split among them) and reports its
real held-out loss; a job whose workers change restores them from its last checkpoint.
Jobs, targets, deadlines and caps come from JOBS.yaml (docs/live.md).  Without --address a
private Ray is started on 127.0.0.1 with the dashboard off.

Writes to --out: results.csv and summary.md (as `mara evaluate`), jobs.csv, slices.csv,
curves.csv (real loss curves; `mara traces import` reads them), throughput.csv,
gantt.png, tb/ (TensorBoard), and the journal and checkpoints --resume continues from.

Examples:
  mara live examples/live/small.yaml --scheduler mara --nodes 4 --out results/live
  mara live jobs.yaml --scheduler lara --nodes 16 --resource GPU --address auto --out run1
  mara live jobs.yaml --scheduler mara --nodes 4 --out results/live --resume
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mara_agents.commands import checks

# what a run writes in --out besides tb/ and checkpoints/ (docs/live.md)
LIVE_FILES = ("*.csv", "summary.md", "gantt.png", "journal.jsonl", "workers.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", type=Path, metavar="JOBS.yaml", help="the job file (docs/live.md)")
    parser.add_argument(
        "--scheduler",
        default="mara",
        help="scheduler or policy spec, as in `mara evaluate` (oracle and bound need true "
        "work and cannot run live)",
    )
    parser.add_argument("--nodes", type=int, default=4, help="nodes (Ray workers) to schedule")
    parser.add_argument(
        "--tick-seconds", type=float, default=2.0, help="wall-clock seconds of one tick"
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--address",
        default=None,
        help="an existing Ray cluster ('auto' or HOST:PORT); default: start a private one on "
        "127.0.0.1",
    )
    parser.add_argument(
        "--resource",
        default=None,
        help="what a node is: GPU, CPU, or a custom resource name (default mara_node, which a "
        "private Ray declares --nodes of)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of each node's worker"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run journalled in --out"
    )
    checks.add_force_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from mara_agents.evaluation.registry import SpecError
    from mara_agents.live.jobfile import JobFileError
    from mara_agents.live.journal import JournalError
    from mara_agents.live.run import run_live
    from mara_agents.outputs import prepare_out

    try:
        nodes = checks.at_least(args.nodes, "--nodes", 1)
        threads = checks.at_least(args.threads, "--threads", 1)
        with prepare_out(
            args.out,
            command="live",
            force=args.force,
            resume=args.resume,
            resumable=True,
            files=LIVE_FILES,
            dirs=("tb", "checkpoints"),
        ):
            df = run_live(
                args.jobs,
                args.scheduler,
                nodes,
                args.tick_seconds,
                args.out,
                address=args.address,
                resume=args.resume,
                resource=args.resource,
                threads=threads,
                progress=not args.no_progress,
            )
    except (SpecError, JobFileError, JournalError, ValueError, RuntimeError) as exc:
        print(f"mara live: error: {exc}", file=sys.stderr)
        return 2
    row = df.iloc[0]
    print(
        f"{args.scheduler} live on {nodes} nodes: {int(row['completed'])}/{int(row['tasks'])} "
        f"jobs completed ({row['completion_rate']:.3f}), {int(row['reassignments'])} "
        f"re-assignments, {int(row['ticks'])} ticks; results in {args.out}"
    )
    return 0
