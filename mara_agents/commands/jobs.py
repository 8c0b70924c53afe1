"""Import and inspect cluster job traces, the jobs that `--jobs` replays (docs/jobs.md).

  mara jobs import philly.csv --out philly_jobs.parquet              # Pollux's Philly CSV
  mara jobs import cluster_log.csv --format helios --out venus.parquet
  mara jobs import my_log.csv --format csv \\
      --map submit=queued_at,end=finished_at,gpus=n_gpu --out mine.parquet
  mara jobs info mine.parquet --nodes 64                           # loads it implies

Formats: philly (the CSV timestamp,duration,num_gpus[,gpu_time,cluster] of Pollux's
simulator, or msr-fiddle's cluster_job_log JSON: run time summed over attempts, GPUs of
the last attempt, unfinished jobs left out), helios (cluster_log.csv: submit_time,
gpu_num, duration or start_time/end_time; job_id and user kept; CPU-only jobs left out),
csv (any CSV or Parquet table, its columns named by --map; times in seconds or as
timestamps YYYY-MM-DD HH:MM:SS).  Jobs shorter than --min-duration or of at least
--max-gpu-hours (duration x GPUs) are left out, as Pollux's workload generator leaves
them out; jobs on more GPUs than a cluster has are kept (a replay caps their reference
allocation at its nodes).  Each day of the trace goes wholly to split train, val or
test by a stable hash of its date.  A bad value stops the import with one line naming
the file, the row and the column, and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="jobs_command", metavar="SUBCOMMAND", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    i = sub.add_parser(
        "import", help="read a cluster's job log into a jobs table", formatter_class=fmt
    )
    i.add_argument("file", type=Path, help="the job log (CSV; philly also JSON, csv also Parquet)")
    i.add_argument(
        "--out",
        type=Path,
        required=True,
        help="jobs table (.parquet) to write, atomically: a new name (or --force)",
    )
    i.add_argument("--force", action="store_true", help="replace OUT if it exists")
    i.add_argument(
        "--format",
        default="philly",
        choices=["philly", "helios", "csv"],
        help="layout of the log: philly (timestamp, duration, num_gpus), helios "
        "(submit_time, gpu_num, duration or start_time/end_time), csv (columns by --map)",
    )
    i.add_argument(
        "--map",
        default=None,
        metavar="ROLE=COL,...",
        help="with --format csv: the columns of submit, gpus and duration (seconds) or end "
        "(a time; duration = end - start, or end - submit without start=), optionally "
        "start, deadline, job_id, user, name; e.g. submit=t0,end=t1,gpus=n",
    )
    i.add_argument(
        "--min-duration",
        type=float,
        default=60.0,
        help="leave out jobs that ran fewer seconds (zero-duration jobs are always left out)",
    )
    i.add_argument(
        "--max-gpu-hours",
        type=float,
        default=1000.0,
        help="leave out jobs of at least this many GPU-hours (duration x GPUs); inf keeps all",
    )
    i.set_defaults(_run=run_import)

    f = sub.add_parser(
        "info", help="counts, quantiles and the load a jobs table implies", formatter_class=fmt
    )
    f.add_argument(
        "jobs", nargs="?", default="philly", help="jobs table, or 'philly' (the shipped one)"
    )
    f.add_argument(
        "--nodes",
        type=int,
        default=16,
        help="cluster size N for the implied load (a day's demand at the jobs' GPUs, capped "
        "at N, over N nodes x 24 h)",
    )
    f.set_defaults(_run=run_info)


def run_import(args: argparse.Namespace) -> int:
    from mara_agents.commands.checks import UsageError, check
    from mara_agents.outputs import OutputError, claim_file
    from mara_env.job_logs import (
        Filters,
        JobsError,
        parse_map,
        read_job_log,
        summary_lines,
        write_jobs,
    )

    try:
        check(args.out.suffix in (".parquet", ".pq"), "--out", args.out, "a .parquet file path")
        if (args.map is not None) != (args.format == "csv"):
            raise UsageError("--map goes with --format csv, and --format csv needs --map")
        mapping = parse_map(args.map) if args.map is not None else None
        filters = Filters(min_duration_s=args.min_duration, max_gpu_hours=args.max_gpu_hours)
        with claim_file(args.out, command="jobs import", force=args.force):
            imported = read_job_log(args.file, args.format, mapping, filters)
            write_jobs(imported.table, args.out)
    except (UsageError, JobsError, OutputError) as exc:
        print(f"mara jobs import: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the table could not be written (nothing half-written)
        print(f"mara jobs import: {args.out}: cannot write ({exc})", file=sys.stderr)
        return 1
    print(f"{args.out}: " + "\n".join(summary_lines(imported.table, imported.dropped)))
    return 0


def run_info(args: argparse.Namespace) -> int:
    import numpy as np

    from mara_agents.commands.checks import UsageError
    from mara_env.config import ClusterConfig, ConfigError
    from mara_env.job_logs import JobsError, jobs_path, read_jobs, summary_lines
    from mara_env.replay import day_loads

    try:
        table = read_jobs(args.jobs)
        config = ClusterConfig(jobs=args.jobs, num_nodes=args.nodes, split="all")
        dates, loads = day_loads(config)
    except (UsageError, JobsError, ConfigError) as exc:
        print(f"mara jobs info: {exc}", file=sys.stderr)
        return 2
    print(f"{jobs_path(args.jobs)}: " + "\n".join(summary_lines(table)))
    split_of = dict(zip(table["date"], table["split"]))
    print(f"a day's implied load on {args.nodes} nodes (jobs' GPUs capped at {args.nodes}):")
    for split in ("train", "val", "test"):
        mine = loads[np.array([split_of[d] == split for d in dates])]
        if len(mine):
            q = np.quantile(mine, [0.25, 0.5, 0.75])
            print(
                f"  {split:5} {len(mine):3} days: quartiles {q[0]:.2f} / {q[1]:.2f} / "
                f"{q[2]:.2f}; days carrying load 1: {int((mine >= 1).sum())}, 2: "
                f"{int((mine >= 2).sum())}"
            )
    return 0
