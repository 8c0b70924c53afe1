"""Tune a rival baseline's knobs on the validation split (one small grid per scheduler).

How to run:   python benchmarks/tune_baselines.py --scheduler tiresias [--episodes 20]
              [--loads 1.0,2.0] [--workers 1] [--out runs/tune_tiresias.csv]

Every grid point of ``GRIDS[NAME]`` runs as the spec ``NAME:knob=value:...`` on the same
validation episodes (common random numbers; base seed 1000, not the evaluation seeds);
the test split is never touched.  Prints one row per grid point, best first: the mean
completion rate per load, their mean with a 95 % t-interval (over episodes, the loads
averaged episode by episode), and the paired difference from the best point on the same
episodes; then the chosen values (the best point, and the best for each value of the
grid's first knob).  The chosen values are the schedulers' defaults (docs/baselines.md).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Sequence

import pandas as pd

from mara_agents.evaluation.runner import evaluate
from mara_agents.evaluation.stats import mean_ci
from mara_env.config import ClusterConfig

# name -> knob -> values; specs join them as NAME:knob=value (no ',' or ':' in a value)
GRIDS: dict[str, dict[str, list]] = {
    "fifo": {"backfill": ["easy", "any", "none"]},
    # thresholds in node-ticks ('-' separates queues); starve: ticks of waiting (0: off)
    "tiresias": {"thresholds": ["16", "32", "64", "16-64"], "starve": [0, 8]},
    # margin < 0 shrinks the predicted total work, > 0 inflates it
    "elasticflow": {"predictor": ["wls", "flow"], "margin": [-0.6, -0.3, 0.0, 0.3]},
    # ucb: forecast sds of optimism; process_noise: slope drift per unit of log-work
    "laira": {"ucb": [2, 4, 8], "process_noise": [0.03, 0.1, 0.3]},
    # LARA's planner fed the flow model's median (LARA's own WLS grid: tune_lara.py)
    "lara": {"predictor": ["flow"], "margin": [-0.6, -0.3, 0.0, 0.3, 0.6]},
}


def grid_specs(name: str) -> list[str]:
    """The specs of ``name``'s grid, in grid order."""
    grid = GRIDS[name]
    return [
        f"{name}:" + ":".join(f"{k}={v}" for k, v in zip(grid, values))
        for values in itertools.product(*grid.values())
    ]


def score(df: pd.DataFrame) -> pd.DataFrame:
    """One row per spec, best first: completion per load, the mean over loads with its 95 %
    t-interval, and the paired difference from the best spec with its interval."""
    per_episode = df.pivot_table(
        index=["scheduler", "episode"], columns="load", values="completion_rate"
    )
    overall = per_episode.mean(axis=1)  # episode i of every load, averaged
    rows = []
    for spec, values in overall.groupby(level="scheduler", sort=False):
        mean, ci = mean_ci(values.to_numpy())
        loads = per_episode.loc[spec].mean()
        rows.append({"spec": spec, **{f"load {x:g}": v for x, v in loads.items()}})
        rows[-1].update(mean=mean, ci95=ci)
    table = pd.DataFrame(rows).sort_values("mean", ascending=False, kind="stable")
    best = overall.loc[table["spec"].iloc[0]].to_numpy()
    paired = [mean_ci(overall.loc[s].to_numpy() - best) for s in table["spec"]]
    table["vs_best"], table["vs_best_ci95"] = zip(*paired)
    return table.reset_index(drop=True)


def chosen(name: str, table: pd.DataFrame) -> list[str]:
    """Lines naming the best point and the best for each value of the first knob."""
    first = next(iter(GRIDS[name]))
    lines = [f"chosen: {_point(table.iloc[0])}"]
    if len(GRIDS[name]) > 1:
        prefix = table["spec"].str.extract(rf":{first}=([^:]*)", expand=False)
        for value in GRIDS[name][first]:
            best = table[prefix == str(value)].iloc[0]
            lines.append(f"best with {first}={value}: {_point(best)}")
    return lines


def _point(row: pd.Series) -> str:
    return f"{row['spec']}  val {row['mean']:.3f} ± {row['ci95']:.3f}"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scheduler", required=True, choices=sorted(GRIDS), help="whose grid to run")
    p.add_argument("--episodes", type=int, default=20, help="episodes per load and grid point")
    p.add_argument("--loads", default="1.0,2.0", help="comma-separated load factors")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    p.add_argument("--seed", type=int, default=1000, help="base seed (not the test seeds)")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--out", default=None, help="also write the table to this CSV file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    specs = grid_specs(args.scheduler)
    loads = [float(x) for x in args.loads.split(",")]
    config = ClusterConfig(traces=args.traces, split="val")
    start = time.perf_counter()
    df = evaluate(
        specs,
        loads,
        args.episodes,
        [args.seed],
        config,
        workers=args.workers,
        progress=not args.no_progress,
    )
    table = score(df)
    print(
        f"{len(specs)} grid points x {len(loads)} loads x {args.episodes} episodes "
        f"on split 'val' in {time.perf_counter() - start:.0f} s"
    )
    with pd.option_context("display.width", 200):
        print(table.round(3).to_string(index=False))
    print("\n".join(chosen(args.scheduler, table)))
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
