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
    """The label and trial directory of ``[LABEL=]TRIAL_DIR``, its result.json read whole."""
    from mara_agents.training.curves import _result_rows

    label, sep, path = arg.partition("=")
    trial = Path(path if sep else arg)
    if trial.is_dir() and not (trial / "result.json").is_file():
        found = sorted(trial.glob("*/result.json"))  # runs/<name>: its single trial
        if len(found) == 1:
            trial = found[0].parent
    if not (trial / "result.json").is_file():
        raise ValueError(f"{arg}: no result.json in {trial} (expected a trial directory)")
    try:
        _result_rows(trial)
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        why = " ".join(str(exc).split())
        raise ValueError(
            f"{trial / 'result.json'}: {why}; expected one JSON object a line, as `mara "
            "train` writes it"
        ) from None
    return (label if sep else trial.parent.name), trial  # default: the run's name


def run(args: argparse.Namespace) -> int:
    from mara_agents.outputs import claim_file
    from mara_agents.training.curves import compare_runs

    try:
        runs = [_trial(a) for a in args.runs]
        for i, (label, trial) in enumerate(runs):
            for other, (label_before, trial_before) in zip(args.runs, runs[:i]):
                if label == label_before or trial.resolve() == trial_before.resolve():
                    same = "label" if label == label_before else "trial"
                    raise ValueError(
                        f"{args.runs[i]!r}: the same {same} as {other!r}; give each run once, "
                        "each under its own label"
                    )
        refs = {}
        for ref in args.reference:
            name, sep, value = ref.partition("=")
            if not sep or not name:
                raise ValueError(f"--reference {ref!r}: expected NAME=VALUE")
            try:
                refs[name] = float(value)
            except ValueError:
                raise ValueError(f"--reference {ref!r}: {value!r} is not a number") from None
        csv = Path(args.csv) if args.csv else Path(args.out).with_suffix(".csv")
        if csv.resolve() == Path(args.out).resolve():
            raise ValueError(
                f"--csv {csv}: the same file as --out {args.out}; expected two files, the "
                "figure and its points"
            )
        with (
            claim_file(args.out, command="curves", force=args.force) as out,
            claim_file(csv, command="curves", force=args.force, option="--csv") as csv,
        ):
            compare_runs(runs, out, csv, refs, args.smooth)
    except ValueError as exc:  # OutputError is one
        print(f"mara curves: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}, {csv}")
    return 0
