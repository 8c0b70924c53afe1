"""Per trace family, how well each source of remaining-work predictions knows the work.

How to run:   python benchmarks/prediction_sources.py [--split test] [--deadline-model padded]
                  [--episodes 6] [--loads 1.0,2.0] [--seed 0] [--csv PATH [--force]]
                  [--quiet]
Plays the harness's episodes (base seed ``--seed``, 16 nodes, the split's traces,
deadlines drawn by ``--deadline-model``) with the ``hedge`` scheduler on the fused
distribution (:data:`DRIVER`, the states every table of docs/predictor.md was measured on)
and, at every tick, asks each source for every active task's remaining-work samples, so
that each source's cache refreshes as ``hedge``'s does: the flow model alone
(``hedge:predictor=flow``), the deadline prior of the cluster's history alone
(``predictor=deadline``), the two fused (``fused``: ``predictor=flow+deadline``, what the
``flow+deadline`` wrapper reads and ``hedge``'s default before the calibrated model), the
calibrated remaining-work model without the flow model's inputs
(``predictor=task-no-flow``) and with them (``predictor=task``, ``hedge``'s default;
:mod:`flow_predictor.task_work`).

A task counts once at each report count in :data:`REPORTS`: at the first tick it is active
with exactly that many loss reports (0 is its arrival, before any report).  A task that
completes or expires first, or whose reports pass the count within one tick, is not counted
there; nor is a task whose trace never reaches its target (no finite truth).  Against each
counted task's exact remaining work it prints, per family and for all families together,
per source and report count: the share of tasks with a prediction, the median
|log(median / truth)| among them (a median of "never" counts as an infinite error), the
shares of truths inside the 10-90 % and 25-75 % intervals (0.8 and 0.5 when calibrated),
each with the half-width of its 95 % t-interval clustered by trace (tasks drawn from one
learning curve are not independent: the trace, not the task, is the unit a family's
coverage is measured on), the mean CRPS of log remaining work (sharpness and calibration
in one number; lower is better), n and the number of distinct traces.  Last, for the
calibrated model (``task``), it counts the (family, report count) cells whose coverages lie
within :data:`BANDS`, and names those whose intervals lie wholly outside a band (among
cells of :data:`MIN_TRACES` traces or more): a cell outside a band but whose interval
reaches it is one the split cannot tell from a calibrated one.  ``--csv`` writes the same rows.
Results to expect: docs/predictor.md ("How well each source knows the work").
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from flow_predictor.remaining import first_at_reports, interval_scores
from mara_agents.baselines.hedge import Hedge
from mara_agents.commands.checks import UsageError, parse_list
from mara_agents.evaluation.runner import episode_seed
from mara_agents.evaluation.stats import clustered_ci
from mara_agents.outputs import OutputError, claim_optional
from mara_env.atomic import atomic_write
from mara_env.cluster import ClusterSim
from mara_env.config import DEADLINE_MODELS, SPLITS, ClusterConfig
from mara_env.schedulers import edf_order
from mara_env.traces import load_traces

REPORTS = (0, 1, 3, 10)
SOURCES = ("flow", "deadline", "flow+deadline", "task-no-flow", "task")
# the predictor whose source is named "fused" (the flow model fused with the deadline
# prior), and the one the episodes are played with
FUSED = "flow+deadline"
DRIVER = FUSED
COLUMNS = (
    "family",
    "source",
    "reports",
    "predicted",
    "log_error",
    "coverage",
    "coverage_ci",
    "coverage50",
    "coverage50_ci",
    "crps",
    "n",
    "traces",
)
# a calibrated distribution's coverages, within these bands (issue 63's goal): the share
# of truths inside the 10-90 % interval, and inside the 25-75 % one
BANDS = {"coverage": (0.75, 0.85), "coverage50": (0.45, 0.55)}
# the source whose per-family cells are counted against BANDS
BANDED = "task"
# a cell's interval is judged against its band only with at least this many traces (a
# cluster-robust interval on fewer is unreliable, and on a cell whose tasks all agree, empty)
MIN_TRACES = 10
# log remaining work of "never" (inf) samples, for the CRPS
_LOG_NEVER = 50.0


def make_sources(sim: ClusterSim) -> dict[str, Any]:
    """Every source by name (each ``hedge:predictor=NAME``'s predictions, with its own
    caches), on the cluster history of ``sim``'s cluster; :data:`FUSED`'s under the name
    ``fused``."""
    sources = {}
    for name in SOURCES:
        hedge = Hedge(predictor=name, miss_cost=1.0)  # (the price never reaches a prediction)
        hedge.reset(sim, np.random.default_rng(0))
        sources["fused" if name == FUSED else name] = hedge._predictions
    return sources


def crps(samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per row, the CRPS of log remaining work: samples read as the distribution's evenly
    spaced quantiles (sorted here), truth one value per row."""
    x = np.sort(np.log(np.clip(samples, 1e-300, None)).clip(None, _LOG_NEVER), axis=1)
    n = x.shape[1]
    y = np.log(truth)[:, None]
    weights = (2 * np.arange(n) - n + 1) / n**2
    return np.abs(x - y).mean(axis=1) - (x * weights).sum(axis=1)


def measure(
    sim: ClusterSim, sources: dict[str, Any], seen: set[tuple[int, int]], rows: list[tuple]
) -> None:
    """Ask every source about the active tasks; one row (family, trace, source, reports,
    known, |log error|, inside 10-90 %, inside 25-75 %, CRPS) per source and task counted
    now (``seen``: the (task, reports) pairs counted before in this episode)."""
    tasks = edf_order(sim)
    if not len(tasks):
        return
    answers = {name: source.get(sim, tasks) for name, source in sources.items()}
    counted, reports, truth = first_at_reports(sim, tasks, REPORTS, seen)
    if not len(counted):
        return
    families = sim.task_families()[tasks[counted]]
    traces = sim.workload.trace[tasks[counted]]
    for name, rw in answers.items():
        samples = rw.samples[counted]
        known = ~(rw.fallback[counted] | np.isnan(samples).any(axis=1))
        s = np.where(known[:, None], samples, 1.0)
        inside, inside50, error = interval_scores(s, truth)
        rows.extend(
            zip(
                families,
                traces,
                [name] * len(counted),
                reports,
                known,
                error,
                inside,
                inside50,
                crps(s, truth),
            )
        )


def play(args: argparse.Namespace) -> pd.DataFrame:
    """The rows of :func:`measure` over the episodes ``args`` names, played with hedge on
    :data:`DRIVER`'s predictions."""
    traces = load_traces(split=args.split)
    rows: list[tuple] = []
    bar = tqdm(total=len(args.loads) * args.episodes, desc="episodes", disable=args.quiet)
    for load in args.loads:
        config = ClusterConfig(split=args.split, load=load, deadline_model=args.deadline_model)
        sources = make_sources(ClusterSim(config, traces))
        for i in range(args.episodes):
            seed = episode_seed(args.seed, load, i)
            sim, hedge = ClusterSim(config, traces), Hedge(predictor=DRIVER)
            sim.reset(np.random.default_rng(seed))
            hedge.reset(sim, np.random.default_rng([seed, 1]))
            for source in sources.values():
                source.clear()
            seen: set[tuple[int, int]] = set()
            while not sim.done:
                measure(sim, sources, seen, rows)
                sim.tick(hedge.assign(sim))
            bar.update(1)
    bar.close()
    return pd.DataFrame(
        rows,
        columns=[
            "family", "trace", "source", "reports", "known", "error", "inside", "inside50",
            "crps",
        ],
    )  # fmt: skip


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per family (and "all"), source and report count: :data:`COLUMNS`."""
    rows = pd.concat([rows, rows.assign(family="all")], ignore_index=True)
    # error and coverage among the tasks with a prediction (NaN elsewhere: left out)
    rows["error"] = rows["error"].where(rows["known"])
    for column in ("inside", "inside50", "crps"):
        rows[column] = rows[column].astype(float).where(rows["known"])
    families = [*sorted(set(rows["family"]) - {"all"}), "all"]
    rows["family"] = pd.Categorical(rows["family"], families, ordered=True)
    names = ["fused" if v == FUSED else v for v in SOURCES]
    rows["source"] = pd.Categorical(rows["source"], names, ordered=True)
    cells = rows.groupby(["family", "source", "reports"], observed=True)
    table = cells.agg(
        predicted=("known", "mean"),
        log_error=("error", "median"),
        coverage=("inside", "mean"),
        coverage50=("inside50", "mean"),
        crps=("crps", "mean"),
        n=("known", "size"),
        traces=("trace", "nunique"),
    )
    for column in ("inside", "inside50"):
        half = cells.apply(lambda cell, c=column: clustered_ci(cell[c], cell["trace"])[1])
        table[column.replace("inside", "coverage") + "_ci"] = half
    return table.reset_index()[list(COLUMNS)]


def band_cells(table: pd.DataFrame, source: str = BANDED) -> tuple[int, int, list[str]]:
    """Of ``source``'s (family, report count) cells (families only): how many there are,
    how many have both coverages within :data:`BANDS`, and a line for each coverage whose
    95 % interval lies wholly outside its band (cells of :data:`MIN_TRACES` traces or more
    only)."""
    part = table[(table["source"] == source) & (table["family"] != "all")].dropna(
        subset=list(BANDS)
    )
    inside = np.ones(len(part), bool)
    judged = part["traces"].to_numpy() >= MIN_TRACES
    outside = []
    for column, (lo, hi) in BANDS.items():
        value, half = part[column].to_numpy(), part[f"{column}_ci"].to_numpy()
        inside &= (lo <= value) & (value <= hi)
        beyond = judged & ((value + half < lo) | (value - half > hi))
        outside.extend(
            f"{r.family} at {r.reports} reports: {value[i]:.2f} ± {half[i]:.2f} outside "
            f"{lo:.2f}-{hi:.2f} ({'10-90' if column == 'coverage' else '25-75'} %)"
            for i, r in enumerate(part.itertuples())
            if beyond[i]
        )
    return len(part), int(inside.sum()), outside


def _share(value: float, half: float) -> str:
    """A coverage and its interval's half-width, 13 wide ("-": no prediction)."""
    if np.isnan(value):
        return f"{'-':>13s}"
    return f"{value:6.2f} ± {half:4.2f}" if np.isfinite(half) else f"{value:13.2f}"


def show(table: pd.DataFrame) -> None:
    """One table per family, then the banded source's count of cells in the bands."""
    for family, part in table.groupby("family", observed=True):
        print(f"\n{family}")
        print(
            f"{'source':13s} {'reports':>7s} {'predicted':>9s} {'|log err|':>9s} "
            f"{'in 10-90%':>13s} {'in 25-75%':>13s} {'CRPS':>6s} {'n':>6s} {'traces':>6s}"
        )
        for r in part.itertuples():
            line = (
                f"{r.source:13s} {r.reports:7d} {r.predicted:9.2f} {r.log_error:9.2f} "
                f"{_share(r.coverage, r.coverage_ci)} {_share(r.coverage50, r.coverage50_ci)} "
                f"{r.crps:6.3f} {r.n:6d} {r.traces:6d}"
            )
            print(line.replace("nan", "  -"))  # no prediction at that count
    cells, inside, outside = band_cells(table)
    bands = " and ".join(f"{lo:.2f}-{hi:.2f}" for lo, hi in BANDS.values())
    print(
        f"\n{BANDED}: {inside} of {cells} (family, report count) cells have both coverages "
        f"within {bands}; {len(outside)} coverages lie outside their band beyond their 95 % "
        f"interval (clustered by trace; cells of {MIN_TRACES} traces or more)"
        + "".join(f"\n  {line}" for line in outside)
    )


def main() -> None:
    """Parse the arguments, play the episodes, print the tables and write the CSV."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--split", default="test", choices=SPLITS, help="trace split (default test)")
    p.add_argument(
        "--deadline-model",
        default=ClusterConfig.deadline_model,
        choices=list(DEADLINE_MODELS),
        help=f"how deadlines are drawn (default {ClusterConfig.deadline_model})",
    )
    p.add_argument("--episodes", type=int, default=6, help="episodes per load (default 6)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the episodes (default 0)")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--force", action="store_true", help="replace --csv if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args()
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    try:
        args.loads = parse_list(args.loads, "--loads", float, "load factors, e.g. 1.0,2.0")
        claim = claim_optional(args.csv, command="prediction_sources", force=args.force)
    except (UsageError, OutputError) as exc:
        p.error(str(exc))
    with claim as out:
        table = summarise(play(args))
        loads = ",".join(f"{v:g}" for v in args.loads)
        print(
            f"{args.split} split, {args.deadline_model} deadlines, {args.episodes} episodes "
            f"per load at loads {loads} (base seed {args.seed}), played with hedge; each task "
            f"once at {', '.join(map(str, REPORTS))} reports (0: arrival)"
        )
        show(table)
        if out is not None:
            data = table.assign(split=args.split, deadline_model=args.deadline_model)
            atomic_write(out, data.to_csv(index=False, float_format="%.4f").encode())


if __name__ == "__main__":
    main()
