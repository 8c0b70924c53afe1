"""Plot the learning curves of several training runs on one figure.

Reads each trial directory's ``result.json`` (what ``mara train`` wrote) and plots the
completion rate of its training episodes against training time and against node
decisions sampled; writes the points as CSV beside the plot.

Example:
  mara curves mara=runs/mara_scratch/PPO_x no_shaping=runs/mara_no_shaping/PPO_y \\
      --reference uniform=0.65 --reference edf=0.56 --out runs/ablations.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="[LABEL=]TRIAL_DIR",
        help="trial directories (runs/<name>/PPO_...), each optionally labelled",
    )
    parser.add_argument("--out", required=True, metavar="PLOT.png", help="figure to write")
    parser.add_argument(
        "--csv",
        default=None,
        metavar="CURVES.csv",
        help="the points as CSV (default: the figure's path with .csv)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a horizontal line, e.g. a heuristic's completion rate on the training split "
        "(repeatable)",
    )
    parser.add_argument(
        "--smooth", type=int, default=5, help="running mean over this many iterations (>= 1)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the figure and the CSV if they exist"
    )


def _trial(arg: str) -> tuple[str, Path]:
    label, sep, path = arg.partition("=")
    trial = Path(path if sep else arg)
    if trial.is_dir() and not (trial / "result.json").is_file():
        found = sorted(trial.glob("*/result.json"))  # runs/<name>: its single trial
        if len(found) == 1:
            trial = found[0].parent
    if not (trial / "result.json").is_file():
        raise ValueError(f"{arg}: no result.json in {trial} (expected a trial directory)")
    return (label if sep else trial.parent.name), trial  # default: the run's name


def run(args: argparse.Namespace) -> int:
    from mara_agents.outputs import prepare_out_file
    from mara_agents.training.curves import compare_runs

    try:
        runs = [_trial(a) for a in args.runs]
        refs = {}
        for ref in args.reference:
            name, sep, value = ref.partition("=")
            if not sep or not name:
                raise ValueError(f"--reference {ref!r}: expected NAME=VALUE")
            try:
                refs[name] = float(value)
            except ValueError:
                raise ValueError(f"--reference {ref!r}: {value!r} is not a number") from None
        if args.smooth < 1:
            raise ValueError(f"--smooth {args.smooth}: expected an integer >= 1")
        out = prepare_out_file(args.out, force=args.force)
        csv = args.csv or out.with_suffix(".csv")
        csv = prepare_out_file(csv, force=args.force, option="--csv")
    except ValueError as exc:  # OutputError is one
        print(f"error: {exc}", file=sys.stderr)
        return 2
    compare_runs(runs, out, csv, refs, args.smooth)
    print(f"wrote {out}, {csv}")
    return 0
