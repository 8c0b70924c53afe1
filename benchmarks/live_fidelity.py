"""Simulator fidelity: schedulers live on real jobs, then the same jobs in the calibrated
simulator, over several job files.

How to run::

    python benchmarks/live_fidelity.py [--files 10] [--jobs-per-file 8] [--nodes 3]
        [--tick-seconds 1.5] [--schedulers uniform,lara,flow_share,mara] [--sim-seeds 20]
        [--out results/live_fidelity] [--reuse]

1. **Reference curves.** Each built-in trainer is trained once (defaults, seed 0, one
   process), evaluated every ``eval_every`` steps: its loss at a number of steps, and its
   one-process speed.
2. **Job files.** File ``s`` is drawn by a seeded generator (:func:`job_file`): jobs of
   every trainer, each with a required work ``W`` (steps) and the reference loss at ``W``
   as its target, arrivals over the first ticks, and a deadline of ``slack * W`` at
   ``SPEED_SHARE`` of the reference speed, so the nodes cannot serve every job in time.
3. **Live.** Every scheduler runs every file (``mara live`` on one private Ray).
4. **Calibration.** ``mara calibrate`` over all live runs fits ``reassign_cost``,
   ``alpha_range`` and ``throughput_noise`` (``cluster.yaml``).
5. **Simulated.** Each file is replayed in the simulator with those settings: each job's
   evaluations (every run's, merged) as its trace, its throughput fitted to every steady
   slice of its runs (the calibrated ``alpha`` as the prior; the mean, not the log-space
   fit's geometric mean), throughput handed to the schedulers as an estimate
   (``throughput="measured"``), the mean of ``--sim-seeds`` draws of the noise.

Prints, per file and scheduler, the completion rate live and simulated and their
difference (points), the mean absolute difference and how far one simulated draw lies
from the simulated mean, jobs completed per trainer, Kendall's tau between the live and
simulated order of the schedulers per file and pooled (the schedulers' means over files),
in how many files the simulator's winner is a live winner, and the load average while
the live runs ran.

Results to expect: see docs/live.md ("Simulator fidelity").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.stats import kendalltau

from mara_agents.evaluation.registry import expand_alias
from mara_agents.evaluation.runner import run_spec
from mara_agents.live.calibrate import Calibration, calibrate
from mara_agents.live.jobfile import JobFile, load_job_file
from mara_agents.live.run import run_live
from mara_agents.reproduce import markdown_table
from mara_env.cluster import DONE, ClusterSim
from mara_env.config import ClusterConfig
from mara_env.throughput import ThroughputModel
from mara_env.traces import TraceSet
from mara_env.workload import Workload

ROOT = Path(__file__).parents[1]
TRAINERS = ("tabular", "vision", "lm", "rl")
REFERENCE_STEPS = 200  # of each trainer's reference curve
WORK_RANGE = (60, 200)  # required steps of a generated job
SLACK_RANGE = (1.2, 2.5)  # deadline = slack * W at SPEED_SHARE of the reference speed
SPEED_SHARE = 0.4  # of the one-process reference speed a node gets live (3 workers, 2 shared cores)


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


def reference_curves(path: Path) -> pd.DataFrame:
    """Each trainer's evaluations (defaults, seed 0, one process) and its steps per second;
    cached in ``path``."""
    if path.exists():
        return pd.read_csv(path)
    import torch

    from mara_agents.live.trainers import default_eval_every, make_trainer, train_step

    torch.set_num_threads(1)
    rows = []
    for name in TRAINERS:
        trainer, every = make_trainer(name, {}, 0), default_eval_every(name)
        train_s = 0.0
        rows.append({"trainer": name, "step": 0, "loss": trainer.evaluate()})
        for step in range(1, REFERENCE_STEPS + 1):
            t0 = time.perf_counter()
            train_step(trainer)
            train_s += time.perf_counter() - t0
            if step % every == 0:
                rows.append({"trainer": name, "step": step, "loss": trainer.evaluate()})
        for r in rows:
            if r["trainer"] == name:
                r["steps_per_s"] = REFERENCE_STEPS / train_s
    table = pd.DataFrame(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return table


def job_file(seed: int, jobs: int, reference: pd.DataFrame, tick_seconds: float) -> dict:
    """A job file (as a dict) drawn from ``seed``: ``jobs`` jobs cycling over the trainers."""
    rng = np.random.default_rng([seed, 38])
    arrivals = np.sort(rng.integers(0, 5, jobs))
    out = []
    for i, trainer in enumerate(np.resize(rng.permutation(TRAINERS), jobs)):
        ref = reference[reference["trainer"] == trainer]
        steps, loss = ref["step"].to_numpy(), ref["loss"].to_numpy()
        work = int(rng.integers(*WORK_RANGE))
        j = int(np.searchsorted(steps, work, side="right") - 1)
        target = float(np.minimum.accumulate(loss)[j])  # passed by the reference at <= W
        per_tick = ref["steps_per_s"].iloc[0] * tick_seconds * SPEED_SHARE
        slack = rng.uniform(*SLACK_RANGE)
        out.append(
            {
                "name": f"{trainer}-{i}",
                "trainer": str(trainer),
                "seed": int(rng.integers(0, 5)),
                "target": round(target, 4),
                "arrival": int(arrivals[i]),
                "deadline": max(2, math.ceil(slack * work / per_tick)),
            }
        )
    return {"defaults": {"cap": 2}, "jobs": out}


def measured_world(
    runs: dict[str, Path], jobs: JobFile, slices: pd.DataFrame, cal: Calibration
) -> tuple[TraceSet, Workload, np.ndarray]:
    """Traces, workload and rate priors for the simulator from what the live runs of one
    job file recorded (``slices``: every run's slices.csv), with ``cal``'s alpha prior and
    noise."""
    curves = [pd.read_csv(d / "curves.csv") for d in runs.values()]
    frames = []
    for job in jobs.jobs:  # every run's evaluations of the job, merged: the loss at a step
        # is the same whatever the allocation (a job's steps are its single-process steps)
        mine = pd.concat([c[c["trace_id"] == job.name] for c in curves])
        mine = mine.sort_values("step", kind="stable").drop_duplicates("step")
        frames.append(mine.assign(source=mine["source"].iloc[0]))
    # our own runs' curves: steps increase by construction; a job that ran few ticks has
    # fewer points than an imported library needs (MIN_POINTS), which is fine here
    table = pd.concat(frames, ignore_index=True).assign(split="test")
    traces = TraceSet.from_frame(table)
    order = {name: i for i, name in enumerate(traces.ids)}
    ok = slices[(slices["status"] == "ok") & ~slices["passed"].astype(bool)]
    steady = ok[~ok["fresh"].astype(bool) & (ok["slice_steps"] > 0)]
    index = {j.name: k for k, j in enumerate(jobs.jobs)}
    first = next(iter(runs.values())) / "journal.jsonl"
    start = json.loads(first.read_text().splitlines()[0])
    probes, tick = start["probes"], float(start["tick_seconds"])
    prior = np.array([p["steps_per_s"] * tick for p in probes])
    prior = np.where(np.isfinite(prior) & (prior > 0), prior, 1.0)
    alpha_prior = cal.alpha if cal.alpha is not None else 0.8
    model = ThroughputModel(
        np.zeros(len(jobs.jobs), np.int64), alpha_prior=alpha_prior, rate_prior=prior
    )
    model.observe(
        steady["job"].map(index).to_numpy(),
        steady["nodes"].to_numpy(),
        steady["slice_steps"].to_numpy(float),
    )
    rate, alpha = model.rates()
    # the fit is in log space: the geometric mean of a slice's steps; the simulator's
    # noise has mean 1, so its true rate is the arithmetic mean, sqrt(1 + cv**2) above
    rate = rate * math.sqrt(1.0 + cal.throughput_noise**2)
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


def simulate(
    specs: list[str], jobs: JobFile, runs: dict[str, Path], cal: Calibration, nodes: int, seeds: int
) -> tuple[dict[str, tuple[float, float]], pd.DataFrame]:
    """Each spec's completion rate on the job file's replay in the calibrated simulator
    (the mean over ``seeds`` noise draws, and the mean absolute deviation of one draw from
    it), and each job's share of draws in which it completed, per spec."""
    slices = pd.concat([pd.read_csv(d / "slices.csv") for d in runs.values()])
    traces, workload, prior = measured_world(runs, jobs, slices, cal)
    config = ClusterConfig(
        num_nodes=nodes,
        horizon=1 + int(workload.arrival.max()),
        throughput="measured",
        **cal.settings(),
    )
    out, per_job = {}, []
    for spec in specs:
        rates, done = [], np.zeros(len(jobs.jobs))
        for seed in range(seeds):
            sim = ReplaySim(config, traces, workload, prior)
            metrics = run_spec(expand_alias(spec), config, traces, seed, backend=sim)
            rates.append(metrics["completion_rate"])
            done += sim.status == DONE
        out[spec] = (
            float(np.mean(rates)),
            float(np.abs(np.subtract(rates, np.mean(rates))).mean()),
        )
        names = [j.name for j in jobs.jobs]
        per_job.append(pd.DataFrame({"scheduler": spec, "job": names, "simulated": done / seeds}))
    return out, pd.concat(per_job, ignore_index=True)


def _tau(a: pd.Series, b: pd.Series) -> float:
    if a.nunique() < 2 or b.nunique() < 2:
        return float("nan")  # one side ranks every scheduler equal: no order to compare
    return float(kendalltau(a, b).statistic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10, help="generated job files (seeds 0..)")
    parser.add_argument("--jobs-per-file", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--tick-seconds", type=float, default=1.5)
    parser.add_argument("--schedulers", default="uniform,lara,flow_share,mara")
    parser.add_argument("--sim-seeds", type=int, default=20, help="noise draws per replay")
    parser.add_argument("--out", type=Path, default=ROOT / "results/live_fidelity")
    parser.add_argument("--reuse", action="store_true", help="reuse finished live runs in --out")
    args = parser.parse_args()
    specs = args.schedulers.split(",")
    reference = reference_curves(args.out / "reference_curves.csv")
    files = []
    for seed in range(args.files):
        path = args.out / "files" / f"file{seed}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(job_file(seed, args.jobs_per_file, reference, args.tick_seconds))
        path.write_text(f"# benchmarks/live_fidelity.py job file, seed {seed}\n{text}")
        files.append(path)

    import ray

    from mara_agents.live.pool import start_local_ray

    start_local_ray(args.nodes)  # one private Ray for every live run
    runs: dict[Path, dict[str, Path]] = {}
    loads, t0 = [], time.monotonic()
    try:
        for path in files:
            runs[path] = {}
            for spec in specs:
                out = args.out / path.stem / spec.replace(":", "_").replace("=", "_")
                if not (args.reuse and (out / "results.csv").exists()):
                    if out.exists():
                        shutil.rmtree(out)
                    print(f"live: {path.stem} {spec} ...", flush=True)
                    loads.append(os.getloadavg()[0])
                    run_live(path, spec, args.nodes, args.tick_seconds, out, progress=False)
                    loads.append(os.getloadavg()[0])
                runs[path][spec] = out
    finally:
        ray.shutdown()
    live_minutes = (time.monotonic() - t0) / 60
    cal = calibrate([d for r in runs.values() for d in r.values()])
    (args.out / "cluster.yaml").write_text(cal.yaml())

    rows, jobs_rows = [], []
    for path in files:
        jobs = load_job_file(path, args.tick_seconds, args.nodes)
        simulated, per_job = simulate(specs, jobs, runs[path], cal, args.nodes, args.sim_seeds)
        for spec in specs:
            live = pd.read_csv(runs[path][spec] / "results.csv").iloc[0]["completion_rate"]
            mean, spread = simulated[spec]
            row = {"file": path.stem, "scheduler": spec, "live": live, "simulated": mean}
            rows.append({**row, "one_draw": 100 * spread})
            outcome = pd.read_csv(runs[path][spec] / "jobs.csv")[["job", "trainer", "outcome"]]
            mine = per_job[per_job["scheduler"] == spec].merge(outcome, on="job")
            jobs_rows.append(mine.assign(live=mine["outcome"] == "completed"))
    table = pd.DataFrame(rows)
    table["difference"] = 100 * (table["simulated"] - table["live"])  # points
    table.to_csv(args.out / "fidelity.csv", index=False)
    by_job = pd.concat(jobs_rows, ignore_index=True)

    print(
        f"\n{len(files)} job files x {args.jobs_per_file} jobs, {args.nodes} nodes, "
        f"{args.tick_seconds:g} s ticks, {len(specs)} schedulers; simulated: mean of "
        f"{args.sim_seeds} noise draws"
    )
    print(f"calibrated: {cal.settings()} ({cal.joining} joining slices, {cal.steady} steady)")
    print(markdown_table(table.set_index(["file", "scheduler"]).round(3)))
    mad = table["difference"].abs().mean()
    print(
        f"mean |simulated - live|: {mad:.1f} points over {len(table)} runs; mean "
        f"(simulated - live): {table['difference'].mean():+.1f}; one simulated draw differs "
        f"from the simulated mean by {table['one_draw'].mean():.1f} points on average (the "
        "part of the difference a single live run's own chance accounts for)"
    )
    family = by_job.groupby("trainer")[["live", "simulated"]].mean()
    print("jobs completed, per trainer (all files and schedulers):")
    print(markdown_table(family.round(3)))
    taus, same = [], 0
    for name, mine in table.groupby("file", sort=False):
        tau = _tau(mine["live"], mine["simulated"])
        live_best = set(mine.loc[mine["live"] == mine["live"].max(), "scheduler"])
        sim_best = set(mine.loc[mine["simulated"] == mine["simulated"].max(), "scheduler"])
        same += bool(live_best & sim_best)  # tied winners: one in common is the same
        taus.append(tau)
        print(
            f"{name}: Kendall tau {tau:+.2f}; live best {sorted(live_best)}, "
            f"simulated best {sorted(sim_best)}"
        )
    means = table.groupby("scheduler", sort=False)[["live", "simulated"]].mean()
    print(markdown_table(means.round(3)))
    print(
        f"Kendall tau pooled (schedulers' means over files): "
        f"{_tau(means['live'], means['simulated']):+.2f}; mean of the per-file taus "
        f"{np.nanmean(taus):+.2f}; a simulated winner is a live winner in {same} of "
        f"{len(files)} files"
    )
    if loads:
        print(
            f"load average (1 min) at the live runs' starts and ends: median "
            f"{np.median(loads):.1f}, range {min(loads):.1f}-{max(loads):.1f} on "
            f"{os.cpu_count()} cores; live runs took {live_minutes:.1f} min"
        )


if __name__ == "__main__":
    main()
