"""Simulator fidelity: each scheduler live on real jobs, then the same jobs in the simulator.

How to run::

    python benchmarks/live_fidelity.py [--jobs examples/live/small.yaml] [--nodes 4]
        [--tick-seconds 2] [--schedulers uniform,lara,flow_share,mara] [--out DIR]

Each scheduler runs the job file live (``mara live``, a private Ray on this machine).  The
simulator then replays the same arrivals, targets, deadlines and caps with what the live
runs measured: each job's real loss curve (every run's reports of it, merged) as its trace, and
its throughput ``rate * n**alpha`` fitted to the steps of every steady slice (workers
unchanged) of every run; schedulers see throughput estimated as live
(``throughput="measured"``).  A re-assignment costs the simulator's default warm-up tick
(column ``simulated``) or the share of a tick the live runs' restores measured
(``simulated_calibrated``).  Prints each
scheduler's completion live and simulated, the two rankings, and what the live runs
measured that the simulator models coarsely: the set-up seconds of a slice whose workers
changed, the spread of steady throughput, and the evaluation and checkpoint time.

Results to expect: see docs/live.md ("Simulator fidelity").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from mara_agents.evaluation.registry import expand_alias
from mara_agents.evaluation.runner import run_spec
from mara_agents.live.jobfile import JobFile, load_job_file
from mara_agents.live.run import run_live
from mara_agents.reproduce import markdown_table
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.throughput import ThroughputModel
from mara_env.traces import TraceSet
from mara_env.workload import Workload

ROOT = Path(__file__).parents[1]


class ReplaySim(ClusterSim):
    """A simulator whose every episode is one given workload; with measured throughput,
    schedulers start from each job's one-node probe, as they do live."""

    def __init__(
        self, config: ClusterConfig, traces: TraceSet, workload: Workload, prior: np.ndarray
    ) -> None:
        super().__init__(config, traces, record=True)
        self.fixed, self.prior = workload, prior

    def reset(self, rng: np.random.Generator, workload: Workload | None = None) -> None:
        super().reset(rng, self.fixed)
        if self.estimate is not None:
            self.estimate = ThroughputModel(
                self.estimate.group, self.estimate.alpha_prior, rate_prior=self.prior
            )
            self.workload.rate[:], self.workload.alpha[:] = self.estimate.rates()


def measured_world(
    runs: dict[str, Path], jobs: JobFile, slices: pd.DataFrame
) -> tuple[TraceSet, Workload, np.ndarray]:
    """Traces, workload and rate priors for the simulator from what the live runs recorded
    (``slices``: every run's slices.csv)."""
    curves = [pd.read_csv(d / "curves.csv") for d in runs.values()]
    frames = []
    for job in jobs.jobs:  # every run's reports of the job, merged: the loss at a step is
        # the same whatever the allocation (a job's steps are its single-process steps)
        mine = pd.concat([c[c["trace_id"] == job.name] for c in curves])
        mine = mine.sort_values("step", kind="stable").drop_duplicates("step")
        frames.append(mine.assign(source=mine["source"].iloc[0]))
    # our own runs' curves: steps increase by construction; a job that ran few ticks has
    # fewer points than an imported library needs (MIN_POINTS), which is fine here
    table = pd.concat(frames, ignore_index=True).assign(split="test")
    traces = TraceSet.from_frame(table)
    order = {name: i for i, name in enumerate(traces.ids)}
    steady = slices[(slices["status"] == "ok") & (~slices["fresh"].astype(bool))]
    index = {j.name: k for k, j in enumerate(jobs.jobs)}
    with open(next(iter(runs.values())) / "journal.jsonl") as f:
        start = json.loads(f.readline())
    probes, tick = start["probes"], float(start["tick_seconds"])
    prior = np.array([p["steps_per_s"] * tick for p in probes])
    model = ThroughputModel(np.zeros(len(jobs.jobs), np.int64), alpha_prior=0.8, rate_prior=prior)
    model.observe(
        steady["job"].map(index).to_numpy(),
        steady["nodes"].to_numpy(),
        steady["slice_steps"].to_numpy(float),
    )
    rate, alpha = model.rates()
    trace = np.array([order[j.name] for j in jobs.jobs])
    work_true = np.full(len(jobs.jobs), np.inf)
    for k, job in enumerate(jobs.jobs):
        steps, loss = traces.trace(int(trace[k]))
        hit = np.flatnonzero(loss <= job.target)
        if len(hit):
            work_true[k] = steps[hit[0]]
    unknown = np.full(len(jobs.jobs), np.nan)
    workload = Workload(
        arrival=np.array([j.arrival for j in jobs.jobs], np.int64),
        deadline=np.array([j.deadline for j in jobs.jobs], np.int64),
        target=np.array([j.target for j in jobs.jobs]),
        trace=trace,
        cap=np.array([j.cap for j in jobs.jobs], np.int64),
        alpha=alpha,
        rate=rate,
        size=unknown,
        work_sampled=unknown,
        work_true=work_true,
        ref=np.array([j.gpus for j in jobs.jobs], np.int64),
    )
    return traces, workload, prior


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=Path, default=ROOT / "examples/live/small.yaml")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--tick-seconds", type=float, default=2.0)
    parser.add_argument("--schedulers", default="uniform,lara,flow_share,mara")
    parser.add_argument("--out", type=Path, default=ROOT / "results/live_fidelity")
    parser.add_argument("--reuse", action="store_true", help="reuse finished live runs in --out")
    args = parser.parse_args()
    specs = args.schedulers.split(",")
    runs = {}
    for spec in specs:
        out = args.out / spec.replace(":", "_").replace("=", "_")
        if not (args.reuse and (out / "results.csv").exists()):
            print(f"live: {spec} ...", flush=True)
            run_live(args.jobs, spec, args.nodes, args.tick_seconds, out, progress=True)
        runs[spec] = out
    jobs = load_job_file(args.jobs, args.tick_seconds, args.nodes)
    slices = pd.concat([pd.read_csv(d / "slices.csv").assign(scheduler=s) for s, d in runs.items()])
    traces, workload, prior = measured_world(runs, jobs, slices)
    ok = slices[slices["status"] == "ok"]
    fresh, steady = ok[ok["fresh"].astype(bool)], ok[~ok["fresh"].astype(bool)]
    measured_cost = float(np.clip(fresh["setup_s"].median() / args.tick_seconds, 0.0, 1.0))
    costs = {"simulated": True, "simulated_calibrated": measured_cost}
    rows = []
    for spec in specs:
        live = pd.read_csv(runs[spec] / "results.csv").iloc[0]
        row = {"scheduler": spec, "live": live["completion_rate"]}
        for column, cost in costs.items():
            config = ClusterConfig(
                num_nodes=args.nodes,
                horizon=1 + int(workload.arrival.max()),
                throughput="measured",
                reassign_cost=cost,
            )
            sim = ReplaySim(config, traces, workload, prior)
            row[column] = run_spec(expand_alias(spec), config, traces, 0, backend=sim)[
                "completion_rate"
            ]
        rows.append(row)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "fidelity.csv", index=False)
    spread = steady.groupby(["job", "nodes"])["slice_steps"].agg(["mean", "std"])
    print(f"\n{len(jobs.jobs)} jobs, {args.nodes} nodes, {args.tick_seconds:g} s ticks")
    print(markdown_table(table.set_index("scheduler")))
    for column in ("live", *costs):
        rank = table.sort_values(column, ascending=False, kind="stable")["scheduler"].tolist()
        print(f"ranking {column + ':':<22} {' > '.join(rank)}")
    print(
        f"set-up of a slice whose workers changed: {fresh['setup_s'].median():.2f} s median "
        f"({measured_cost:.0%} of a tick): 'simulated' charges a joining node its whole "
        f"first tick (the default), 'simulated_calibrated' {measured_cost:.0%} of it"
    )
    cv = (spread["std"] / spread["mean"]).median()
    print(f"steady throughput, coefficient of variation per job and allocation: {cv:.2f}")
    print(
        f"evaluation + checkpoint after a slice: {ok['eval_s'].median():.2f} s median; "
        f"lost or failed slices: {int((slices['status'] != 'ok').sum())}"
    )
    for column in costs:
        gap = (table[column] - table["live"]).abs().max()
        print(f"max |{column} - live| completion: {gap:.3f}")


if __name__ == "__main__":
    main()
