"""Fit the simulator's cluster to live runs, so that schedulers can be compared at scale on
a simulator fitted to your own cluster.

Reads the slices.csv and journal.jsonl of one or more finished `mara live` runs and writes
a cluster file (YAML) with three ClusterConfig settings the simulator otherwise assumes:
reassign_cost (the share of a tick a joining node loses), alpha_range (the speed-up
prior, steps = rate * nodes**alpha) and throughput_noise (the spread of a tick's steps).
`mara evaluate` and `mara simulate` take the file with --cluster; its keys also go into
an experiment's env: section.  Prints what each setting rests on.  See docs/live.md.

Example:
  mara live examples/live/small.yaml --scheduler lara --out runs/live1
  mara calibrate runs/live1 --out cluster.yaml
  mara evaluate --cluster cluster.yaml --schedulers lara,uniform --nodes 64 --out runs/eval
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="+", type=Path, metavar="LIVE_RUN_DIR", help="--out folders of `mara live`"
    )
    parser.add_argument("--out", type=Path, required=True, help="the cluster file to write (YAML)")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")


def run(args: argparse.Namespace) -> int:
    from mara_agents.live.calibrate import CalibrationError, calibrate
    from mara_agents.outputs import OutputError, claim_file
    from mara_env.atomic import atomic_write
    from mara_env.config import ClusterConfig, ConfigError

    try:
        with claim_file(args.out, command="calibrate", force=args.force) as out:
            fitted = calibrate(args.runs)
            try:  # what --cluster will read back: a value it refuses is never written
                ClusterConfig.from_dict(fitted.settings(), where="fitted")
            except ConfigError as exc:
                raise CalibrationError(f"{', '.join(fitted.runs)}: {exc}") from None
            atomic_write(out, fitted.yaml().encode())
    except (CalibrationError, OutputError) as exc:
        print(f"mara calibrate: error: {exc}", file=sys.stderr)
        return 2
    alpha = "not fitted (default range kept)" if fitted.alpha is None else f"{fitted.alpha:.3f}"
    print(
        f"reassign_cost {fitted.reassign_cost:.3f} ({fitted.joining} slices with a joining "
        f"node), alpha {alpha} ({fitted.alpha_jobs} jobs at two allocations or more), "
        f"throughput_noise {fitted.throughput_noise:.3f} ({fitted.steady} steady slices)"
    )
    if fitted.unmeasured:
        print(
            f"note: {fitted.unmeasured} slices with a joining node had no setup_s (NaN) and "
            "were left out of reassign_cost"
        )
    if fitted.shrinking:
        print(
            f"note: {fitted.shrinking} slices changed workers with none joining (a node left); "
            "they restore too, a cost the simulator does not charge"
        )
    print(f"wrote {out}")
    return 0
