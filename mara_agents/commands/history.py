"""Tune a cluster's history once, and keep it in a file that later runs read.

  mara calibrate runs/live1 --out cluster.yaml
  mara history fit --cluster cluster.yaml --out history.json
  mara evaluate --cluster cluster.yaml --history history.json --schedulers hedge,mara ...

`fit` plays hedge with each price of a miss (1, 0.1, 0) on the cluster's history (train
split, both shipped workloads, loads 1 / 1.5 / 2, 20 episodes each, paired), then, at the
price kept, with each remaining-work distribution (the calibrated model `task`, the fused
`flow+deadline`) on each workload's own episodes (about 7 minutes on one core, with
progress bars).  It prints each lead with its 95 % t-interval and writes what is kept to
--out (a JSON list of tunings; a record of the same cluster there is replaced, others are
kept): the price, and per workload the distribution (`task` unless the other leads
there).  The shipped tunings (mara_agents/planning/history_choices.json) cover the
default cluster and the deadline models unbiased and blind; the validation and test
splits are never touched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mara_agents.planning.history import DISTRIBUTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="history_command", metavar="SUBCOMMAND", required=True)
    fit = sub.add_parser(
        "fit",
        help="tune the price of a miss and the distribution on a cluster's history and write them",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    fit.add_argument(
        "--cluster",
        default=None,
        metavar="CLUSTER.yaml",
        help="the cluster's settings (ClusterConfig keys, e.g. from `mara calibrate`; "
        "default: the default cluster)",
    )
    fit.add_argument("--out", type=Path, required=True, help="the history file to write (JSON)")
    fit.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    fit.set_defaults(_run=run_fit)


def _points(leads: dict[str, Any]) -> str:
    return ", ".join(f"{k} {100 * m:+.1f} ± {100 * h:.1f}" for k, (m, h) in leads.items())


def lead_lines(name: str, record: dict[str, Any]) -> str:
    """What a tuning ``record`` chose for cluster ``name``: each price's lead over 1, and
    per workload each distribution's lead over the calibrated model."""
    rows = [f"{name}: miss_cost {record['miss_cost']:g}"]
    for price, leads in record["leads"].items():
        rows.append(f"  miss_cost {price} minus 1 (points): {_points(leads)}")
    for job, chosen in record.get("distribution", {}).items():
        rows.append(f"{name}, workload {job}: predictor {chosen}")
        for other, leads in record["distribution_leads"][job].items():
            rows.append(f"  {other} minus {DISTRIBUTIONS[0]} (points): {_points(leads)}")
    return "\n".join(rows)


def run_fit(args: argparse.Namespace) -> int:
    from mara_agents.evaluation.tuning import tune_history
    from mara_agents.outputs import OutputError, claim_file
    from mara_agents.planning.history import history_settings, write_choices
    from mara_env.config import ClusterConfig, ConfigError, load_cluster_file

    try:
        values = {} if args.cluster is None else load_cluster_file(args.cluster)
        settings = history_settings(ClusterConfig.from_dict(values, where=str(args.cluster)))
        with claim_file(args.out, command="history fit", extend=True) as out:
            record = tune_history(settings, progress=not args.no_progress)
            write_choices([record], out)
    except (ConfigError, OutputError, ValueError) as exc:
        print(f"mara history fit: error: {exc}", file=sys.stderr)
        return 2
    print(lead_lines(args.cluster or "default", record))
    print(f"wrote {args.out}")
    return 0
