"""Collect, import and inspect trace libraries (real learning curves).

  mara traces collect --family rl --n 50 --out my_rl.parquet   # really trains models
  mara traces import runs.csv events/ --out mylib.parquet      # bring your own curves
  mara traces info [LIB]                                       # counts per family x split

A library is a Parquet/CSV long-form table with columns
trace_id, family, source, step, loss (and optionally split).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="traces_command", metavar="SUBCOMMAND", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    c = sub.add_parser(
        "collect", help="train real models and record their loss curves", formatter_class=fmt
    )
    c.add_argument(
        "--family",
        required=True,
        choices=["tabular", "vision", "rl"],
        help="which kind of models to train",
    )
    c.add_argument("--n", type=int, required=True, help="number of runs (traces) to collect")
    c.add_argument(
        "--out",
        type=Path,
        required=True,
        help="Parquet file to write; if it exists, collection resumes and appends",
    )
    c.add_argument("--seed", type=int, default=0, help="seed that draws the run configurations")
    c.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    c.set_defaults(_run=run_collect)

    i = sub.add_parser(
        "import", help="validate your own curves and add them to a library", formatter_class=fmt
    )
    i.add_argument(
        "files",
        nargs="+",
        type=Path,
        help="CSV/Parquet files (long form) or TensorBoard event files/directories",
    )
    i.add_argument(
        "--out",
        type=Path,
        required=True,
        help="library (Parquet) to create or extend; written atomically",
    )
    i.add_argument(
        "--tag",
        default=None,
        help="scalar tag to read from TensorBoard events (required if several)",
    )
    i.set_defaults(_run=run_import)

    f = sub.add_parser("info", help="counts per family and split", formatter_class=fmt)
    f.add_argument(
        "library",
        nargs="?",
        type=Path,
        default=None,
        help="trace library (default: the shipped one)",
    )
    f.set_defaults(_run=run_info)


def run_collect(args: argparse.Namespace) -> int:
    from mara_agents.commands.checks import UsageError, at_least
    from mara_agents.extras import require

    require("collect")
    try:
        at_least(args.n, "--n", 1)
        at_least(args.workers, "--workers", 1)
        at_least(args.seed, "--seed", 0)
    except UsageError as exc:
        print(f"mara traces collect: {exc}", file=sys.stderr)
        return 2
    from mara_traces.collect import collect

    df = collect(args.family, args.n, args.out, seed=args.seed, workers=args.workers)
    print(f"{args.out}: {df['trace_id'].nunique()} traces, {len(df)} points")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from mara_env.traces import TraceError, import_traces

    try:
        df = import_traces(args.files, args.out, tag=args.tag)
    except TraceError as exc:
        print(f"mara traces import: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the library could not be written (nothing half-written)
        print(f"mara traces import: {args.out}: cannot write ({exc})", file=sys.stderr)
        return 1
    print(f"{args.out}: {df['trace_id'].nunique()} traces, {len(df)} points")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from mara_env.traces import SHIPPED_LIBRARY, TraceError, read_traces

    path = args.library or SHIPPED_LIBRARY
    try:
        df = read_traces(path)
    except TraceError as exc:
        print(f"mara traces info: {exc}", file=sys.stderr)
        return 1
    per_trace = df.groupby("trace_id", sort=False).agg(
        family=("family", "first"),
        split=("split", "first"),
        source=("source", "first"),
        points=("step", "size"),
    )
    table = per_trace.groupby(["family", "split"]).agg(
        traces=("points", "size"), sources=("source", "nunique"), min_points=("points", "min")
    )
    print(f"{path}: {len(per_trace)} traces, {len(df)} points")
    print(table.to_string())
    return 0
