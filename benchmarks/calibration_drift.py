"""Does the calibrated remaining-work model keep its coverage on a cluster unlike its history?

How to run:   python benchmarks/calibration_drift.py [--split test] [--episodes 20]
                  [--loads 1.0,2.0] [--seed 0] [--phases 3] [--blocks 4]
                  [--csv PATH [--force]] [--completion [--completion-csv PATH]]
The remaining-work model (:mod:`flow_predictor.task_work`, what ``hedge`` reads) reads
the cluster's history twice: the deadline prior fitted on its past tasks is one of its
inputs, and its recalibration starts from the history's and moves during a run with the
tasks that finish or expire (expiries censored).  Here each scenario of
:data:`SCENARIOS` draws the episodes' deadlines under one deadline model and gives the
model the history of a cluster whose users set deadlines by another (the prior fitted on
that cluster's train tasks): users who pad their estimates against a history of users who
do not, and the reverse; users who pad four times more than the history's, and users
whose estimates are far noisier (``loose`` and ``noisy``: deadline settings none of the
shipped histories was drawn under).  The scenarios where the two agree are the reference.

The harness's episodes (base seed ``--seed``, 16 nodes) are played by ``hedge`` as that
cluster would run it: on the scenario's history (its price of a miss) and on the
``online`` copy of the task model.  At each tick three copies of the task model on the
scenario's history are asked about every active task: ``online`` (the run's
recalibration, as ``hedge`` reads it), ``held`` (the history's recalibration, never
updated) and ``carried`` (updated, and carried from each episode into the next of the
same scenario and load: a cluster's consecutive days).  A task counts once at arrival
and at its 1st, 3rd and 10th report (:data:`REPORTS`), in the phase of the episode it is
in then (``--phases`` equal parts of the horizon) and in its block of days (``--blocks``
equal parts of the episodes, in the order played); a task whose trace never reaches its
target is left out.  Printed per scenario and copy, by block of days and by phase: the
shares of truths inside the 10-90 % and 25-75 % intervals (0.8 and 0.5 when calibrated),
the median |log(median / truth)|, and n; ``--csv`` writes the same rows.  No copy is told
a task's truth before it ends.

With ``--completion`` every scenario's episodes are played a second time, ``hedge``
planning on a fresh carried copy (its first day is the first pass's), and it prints per
scenario and load ``hedge``'s completion rate on each copy and the paired difference
(carried minus online, points, 95 % t-interval over the episodes);
``--completion-csv`` writes that table.
Results to expect: docs/predictor.md ("A cluster unlike its history").
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from tqdm import tqdm

from flow_predictor.checkpoint import load_predictor
from flow_predictor.deadline_prior import DeadlinePrior
from flow_predictor.flow import FlowPredictor
from flow_predictor.remaining import (
    FLOW_SAMPLES,
    REFRESH,
    PredictionCache,
    RemainingWork,
    first_at_reports,
    interval_scores,
)
from flow_predictor.task_work import TaskWork, TaskWorkModel
from mara_agents.baselines.hedge import Hedge
from mara_agents.commands.checks import UsageError, parse_list
from mara_agents.evaluation.runner import episode_seed
from mara_agents.evaluation.stats import mean_ci
from mara_agents.outputs import OutputError, claim_optional
from mara_agents.planning.hedge_rule import DEFAULTS
from mara_agents.planning.history import ClusterHistory
from mara_env.atomic import atomic_write
from mara_env.cluster import ClusterSim
from mara_env.config import SPLITS, ClusterConfig
from mara_env.schedulers import edf_order, place
from mara_env.threads import single_threaded
from mara_env.traces import TraceSet, load_traces

REPORTS = (0, 1, 3, 10)
# users who set deadlines by none of the three models (docs/results.md, "Deadline models
# not among the three"): estimates padded four times more, and unbiased ones far noisier
LOOSE = {
    "estimate_padding": 8.0,
    "estimate_spread": 1.5,
    "estimate_top_share": 0.4,
    "estimate_menu": (3, 10, 30, 100),
}
NOISY = {"deadline_model": "unbiased", "deadline_sigma": 1.2}
# how the episodes' deadlines are drawn, and the cluster whose history the model reads:
# (name, ClusterConfig settings) each
PADDED, UNBIASED, BLIND = ({"deadline_model": m} for m in ("padded", "unbiased", "blind"))
SCENARIOS = (
    (("padded", PADDED), ("padded", PADDED)),
    (("padded", PADDED), ("unbiased", UNBIASED)),
    (("unbiased", UNBIASED), ("unbiased", UNBIASED)),
    (("unbiased", UNBIASED), ("padded", PADDED)),
    (("blind", BLIND), ("blind", BLIND)),
    (("blind", BLIND), ("padded", PADDED)),
    (("loose", LOOSE), ("padded", PADDED)),
    (("noisy", NOISY), ("unbiased", UNBIASED)),
)
# the run's recalibration: updated and reset every episode (what hedge reads), never
# updated, or updated and carried from each episode into the next (a cluster's next day)
COPIES = ("online", "held", "carried")
COLUMNS = ("tasks", "history", "copy", "days", "phase", "coverage", "coverage50", "log_error", "n")


def play(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per scenario, copy, counted task and report count: whether its truth lay in
    each interval, the error of the median, the block of days and the phase; and one row
    per scenario, load and episode: the completion rate of ``hedge`` planning on the
    online copy and (with ``--completion``) on the carried one."""
    traces = load_traces(split=args.split)
    model, flow = TaskWorkModel.load(), load_predictor(n_samples=FLOW_SAMPLES)
    rows: list[tuple] = []
    done: list[dict] = []
    passes = 2 if args.completion else 1
    bar = tqdm(
        total=len(SCENARIOS) * len(args.loads) * args.episodes * passes,
        desc="episodes",
        disable=args.quiet,
    )
    for (tasks_name, tasks_settings), (history_name, history_settings) in SCENARIOS:
        for load in args.loads:
            config = ClusterConfig(split=args.split, load=load, **tasks_settings)
            history = ClusterHistory.of(ClusterConfig(split=args.split, **history_settings))

            # hedge as this cluster runs it: on the distribution of a copy, with the
            # history's price of a miss (its planning on exact work is never asked for)
            hedge = Hedge(predictor="exact", miss_cost=history.price())
            for plan_on, names in (("online", COPIES), ("carried", ("carried",)))[:passes]:
                asked = _copies(model, flow, history.prior, names)
                for i in range(args.episodes):
                    seed = episode_seed(args.seed, load, i)
                    days = i * args.blocks // args.episodes
                    rate, found = _day(config, traces, seed, hedge, asked, plan_on, args.phases)
                    if plan_on == "online":  # the coverage is measured in the first pass
                        rows.extend((tasks_name, history_name, c, days, *r) for c, *r in found)
                    done.append(
                        {
                            "tasks": tasks_name,
                            "history": history_name,
                            "load": load,
                            "episode": i,
                            "plan_on": plan_on,
                            "completion_rate": rate,
                        }
                    )
                    bar.update(1)
    bar.close()
    return (
        pd.DataFrame(
            rows,
            columns=["tasks", "history", "copy", "days", "phase", "inside", "inside50", "error"],
        ),
        pd.DataFrame(done),
    )


def _copies(
    model: TaskWorkModel, flow: FlowPredictor, prior: DeadlinePrior, names: tuple[str, ...]
) -> dict[str, TaskWork]:
    """Copies of the remaining-work model on ``prior`` by name (:data:`COPIES`), sharing
    one cache of the flow model's samples."""
    cache = PredictionCache(flow, REFRESH)
    return {
        name: TaskWork(model, prior, cache, DEFAULTS.quantiles, online=name != "held")
        for name in names
    }


def _day(
    config: ClusterConfig,
    traces: TraceSet,
    seed: int,
    hedge: Hedge,
    copies: dict[str, TaskWork],
    plan_on: str,
    phases: int,
) -> tuple[float, list[tuple]]:
    """One episode (day) of ``hedge`` planning on ``copies[plan_on]``, every copy asked
    about every active task at every tick (the carried copy keeps the run's calibration of
    the days before): its completion rate, and (copy, phase, inside 10-90 %, inside
    25-75 %, |log error|) of each task counted."""
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(seed))
    hedge.reset(sim, np.random.default_rng([seed, 1]))
    for name, copy in copies.items():
        copy.clear(calibration=name != "carried")
    seen: set[tuple[int, int]] = set()
    found: list[tuple] = []
    with single_threaded():
        while not sim.done:
            phase = min(int(phases * sim.t / config.horizon), phases - 1)
            order = edf_order(sim)
            answers = {name: copy.get(sim, order) for name, copy in copies.items()}
            for name, scored in _score(sim, order, answers, seen):
                found.extend((name, phase, *r) for r in scored)
            sim.tick(place(sim, hedge.plan(sim, order, answers[plan_on])[0]))
    return sim.metrics()["completion_rate"], found


def _score(
    sim: ClusterSim, order: np.ndarray, answers: dict[str, RemainingWork], seen: set
) -> list[tuple[str, list[tuple[bool, bool, float]]]]:
    """Per copy, (inside 10-90 %, inside 25-75 %, |log error|) of each task of ``order``
    counted now (``seen``: the (task, reports) pairs counted before in this episode)."""
    counted, _, t = first_at_reports(sim, order, REPORTS, seen)
    if not len(counted):
        return []
    return [
        (name, list(zip(*interval_scores(rw.samples[counted], t)))) for name, rw in answers.items()
    ]


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per scenario, copy and block of days over all phases, per scenario, copy
    and phase over all days, and per scenario and copy over both (``"all"``)."""
    rows = rows.astype({"days": str, "phase": str})
    parts = [
        rows.assign(phase="all"),
        rows.assign(days="all"),
        rows.assign(days="all", phase="all"),
    ]
    table = (
        pd.concat(parts, ignore_index=True)
        .groupby(["tasks", "history", "copy", "days", "phase"], sort=False)
        .agg(
            coverage=("inside", "mean"),
            coverage50=("inside50", "mean"),
            log_error=("error", "median"),
            n=("inside", "size"),
        )
    )
    return table.reset_index()[list(COLUMNS)]


def completion(done: pd.DataFrame) -> pd.DataFrame:
    """Per scenario and load: ``hedge``'s completion rate planning on the online copy and
    on the carried one, and the paired difference (carried minus online, points) with the
    half-width of its 95 % t-interval over the episodes."""
    out = []
    for (tasks, history, load), part in done.groupby(["tasks", "history", "load"], sort=False):
        rates = part.pivot(index="episode", columns="plan_on", values="completion_rate")
        gain, half = mean_ci(100 * (rates["carried"] - rates["online"]).to_numpy())
        out.append(
            {
                "tasks": tasks,
                "history": history,
                "load": load,
                "online": rates["online"].mean(),
                "carried": rates["carried"].mean(),
                "carried_minus_online": gain,
                "ci95": half,
                "episodes": len(rates),
            }
        )
    return pd.DataFrame(out)


def main() -> None:
    """Parse the arguments, play the episodes, print the table and write the CSV."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--split", default="test", choices=SPLITS, help="trace split (default test)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per load (default 20)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the episodes (default 0)")
    p.add_argument(
        "--phases", type=int, default=3, help="parts of the horizon reported apart (default 3)"
    )
    p.add_argument(
        "--blocks",
        type=int,
        default=None,
        help="blocks of consecutive episodes (days) reported apart (default 4, or "
        "--episodes if fewer)",
    )
    p.add_argument("--csv", help="also write the table to this CSV file")
    p.add_argument("--force", action="store_true", help="replace --csv if it exists")
    p.add_argument(
        "--completion",
        action="store_true",
        help="also play every scenario's episodes again with hedge planning on the carried "
        "copy, and print its completion rate against planning on the online copy (paired)",
    )
    p.add_argument(
        "--completion-csv",
        help="with --completion: also write its table (per scenario and load) to this CSV file",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args()
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    if args.phases < 1:
        p.error("--phases must be >= 1")
    if args.blocks is None:
        args.blocks = min(4, args.episodes)
    if not 1 <= args.blocks <= args.episodes:
        p.error("--blocks must be in [1, --episodes]")
    try:
        args.loads = parse_list(args.loads, "--loads", float, "load factors, e.g. 1.0,2.0")
        if args.completion_csv and not args.completion:
            raise UsageError("--completion-csv needs --completion")
        claim = claim_optional(args.csv, command="calibration_drift", force=args.force)
        claim_gains = claim_optional(
            args.completion_csv,
            command="calibration_drift",
            force=args.force,
            option="--completion-csv",
        )
    except (UsageError, OutputError) as exc:
        p.error(str(exc))
    with claim as out, claim_gains as out_gains:
        rows, done = play(args)
        table = summarise(rows)
        loads = ",".join(f"{v:g}" for v in args.loads)
        print(
            f"{args.split} split, 16 nodes, {args.episodes} episodes per load at loads {loads} "
            f"(base seed {args.seed}), played by hedge on the history named; each task once "
            f"at {', '.join(map(str, REPORTS))} reports"
        )
        with pd.option_context("display.width", 120, "display.max_rows", 500):
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if args.completion:
            print("\nhedge's completion rate planning on the online and the carried copy")
            gains = completion(done)
            print(gains.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            if out_gains is not None:
                data = gains.assign(split=args.split)
                atomic_write(out_gains, data.to_csv(index=False, float_format="%.4f").encode())
        if out is not None:
            data = table.assign(split=args.split)
            atomic_write(out, data.to_csv(index=False, float_format="%.4f").encode())


if __name__ == "__main__":
    main()
