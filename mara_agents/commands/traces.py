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
        choices=["tabular", "vision", "rl", "lm"],
        help="collect only this kind of model (default: the whole shipped recipe, "
        "mara_traces.collect.LIBRARY_RECIPE)",
    )
    c.add_argument("--n", type=int, help="with --family: number of runs (traces) to collect")
    c.add_argument(
        "--stream",
        default="v1",
        help="with --family: config stream (v1; rl also x1; rl/tabular/vision also v2)",
    )
    c.add_argument(
        "--out",
        type=Path,
        required=True,
        help="Parquet file to write; if it exists, collection resumes and appends",
    )
    c.add_argument(
        "--ship",
        type=Path,
        help="also write the shipped form here: the library without runs that never learned",
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
        help="library (Parquet or CSV) to create, or to extend keeping every column it "
        "holds; written atomically",
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
    f.add_argument(
        "--sources",
        action="store_true",
        help="also list each split's datasets / environments / corpora (the source's first key)",
    )
    f.set_defaults(_run=run_info)


def run_collect(args: argparse.Namespace) -> int:
    from mara_agents.commands.checks import UsageError, check, output_file
    from mara_agents.extras import require

    require("collect")
    try:
        if args.family is not None:
            if args.n is None:
                raise UsageError("--n is required with --family")
        elif args.n is not None or args.stream != "v1":
            raise UsageError("--n and --stream need --family (without it the recipe decides)")
        for path, flag in ((args.out, "--out"), (args.ship, "--ship")):
            if path is not None:
                check(path.suffix in (".parquet", ".pq"), flag, path, "a .parquet file path")
                output_file(path, flag)
    except UsageError as exc:
        print(f"mara traces collect: {exc}", file=sys.stderr)
        return 2
    from mara_env.traces import write_traces
    from mara_traces.collect import build_library, collect, learning_traces, streams

    if args.family is not None and args.stream not in streams(args.family):
        known = streams(args.family)
        print(
            f"mara traces collect: --stream {args.stream!r} for {args.family}: expected one "
            f"of {known}",
            file=sys.stderr,
        )
        return 2
    if args.family is None:
        df = build_library(args.out, seed=args.seed, workers=args.workers)
    else:
        df = collect(
            args.family, args.n, args.out, seed=args.seed, workers=args.workers, stream=args.stream
        )
    print(f"{args.out}: {df['trace_id'].nunique()} traces, {len(df)} points")
    if args.ship is not None:
        shipped, dropped = learning_traces(df)
        write_traces(shipped, args.ship)
        print(
            f"{args.ship}: {shipped['trace_id'].nunique()} traces; {len(dropped)} runs that "
            f"never learned left out{': ' + ', '.join(dropped) if dropped else ''}"
        )
    return 0


def run_import(args: argparse.Namespace) -> int:
    from mara_agents.outputs import OutputError, claim_file
    from mara_env.traces import TraceError, import_traces

    try:
        with claim_file(args.out, command="traces import", extend=True):
            df = import_traces(args.files, args.out, tag=args.tag)
    except (TraceError, OutputError) as exc:
        print(f"mara traces import: {exc}", file=sys.stderr)
        return 2
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
        return 2
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
    if args.sources:
        # The first key=value of a source names its data (dataset=, env=, corpus=, ...).
        per_trace["data"] = per_trace["source"].str.split(";").str[0]
        by = per_trace.groupby(["family", "split"], sort=True)["data"]
        print("\nfamily   split  data (traces)")
        for (family, split), data in by:
            counts = data.value_counts().sort_index()
            listed = ", ".join(f"{k} ({v})" for k, v in counts.items())
            print(f"{family:8} {split:6} {listed}")
    return 0
