"""``mara live``: schedule the real jobs of a job file on a Ray cluster and report as ``mara
evaluate`` does.

The scheduler or policy is built from its spec as in evaluation and driven by the same
episode loop (:func:`mara_agents.evaluation.runner.run_spec`) over a
:class:`~mara_agents.live.cluster.LiveCluster`.  The output directory holds
``results.csv`` and ``summary.md`` (the columns and tables of ``mara evaluate``),
``jobs.csv`` (each job's outcome), ``slices.csv`` (every slice: workers, steps, set-up,
training and evaluation seconds), ``curves.csv`` (each job's real held-out loss against
its steps, importable with ``mara traces import``), ``throughput.csv`` (each job's fitted
``rate`` and ``alpha``), ``gantt.png``, ``tb/`` (TensorBoard scalars per tick) and the
journal and checkpoints that ``--resume`` continues from.

Everything that can be checked is checked before Ray starts, and a refused run leaves
nothing behind: the scheduler (a dry run of a few ticks over a pool that trains nothing,
so a scheduler that needs what a live cluster cannot give, such as true remaining work,
is refused), ``out``, the job file, and every job's trainer and parameters (each distinct
one is built once, so the trainer's own limits apply).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mara_agents.evaluation.registry import (
    SpecError,
    check_spec,
    expand_alias,
    is_bound_spec,
    spec_files,
    spec_note,
)
from mara_agents.live import processes
from mara_agents.live.cluster import LiveCluster, Slice
from mara_agents.live.jobfile import JobFile, JobFileError, load_job_file
from mara_agents.live.journal import Journal, JournalError
from mara_agents.outputs import INPUTS, changed_input, input_digests, output_dir_problem
from mara_env.atomic import atomic_write
from mara_env.cluster import DONE, EXPIRED

SETTINGS = ("digest", "scheduler", "nodes", "tick_seconds")  # a resumed run must match these
DRY_TICKS = 3  # ticks with active jobs that the pre-flight dry run plays


def run_live(
    job_file: str | Path,
    scheduler: str,
    nodes: int,
    tick_seconds: float,
    out: str | Path,
    address: str | None = None,
    resume: bool = False,
    resource: str | None = None,
    threads: int = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """Run the job file live; returns the results table (one row) and writes ``out``."""
    from mara_agents.evaluation.runner import build
    from mara_agents.evaluation.tuning import resolve_history
    from mara_agents.live import pool as pool_mod
    from mara_env.config import ClusterConfig

    out = Path(out)
    spec = expand_alias(scheduler)
    if is_bound_spec(spec):
        raise SpecError(f"{scheduler!r} is a bound computed from true work: it cannot run live")
    check_spec(spec)
    if not (isinstance(tick_seconds, (int, float)) and 0.2 <= tick_seconds <= 3600):
        raise ValueError(f"--tick-seconds {tick_seconds}: expected seconds in [0.2, 3600]")
    problem = output_dir_problem(out)
    if problem is not None:
        raise ValueError(f"--out {out}: {problem}")
    jobs = load_job_file(job_file, tick_seconds, nodes)
    journal = Journal(out)
    settings = {
        "digest": jobs.digest,
        "scheduler": scheduler,
        "nodes": nodes,
        "tick_seconds": float(tick_seconds),
        INPUTS: input_digests(("--scheduler", path) for path in spec_files(spec)),
    }
    start, ticks = None, []
    if resume:
        start, ticks = journal.read()
        changed = changed_input(start.get(INPUTS) or {}, settings[INPUTS])
        if changed is not None:
            raise JournalError(f"{journal.path}: {changed}; a resumed run reads the same files")
        for key in SETTINGS:
            if start.get(key) != settings[key]:
                raise JournalError(
                    f"{journal.path}: the run was started with {key}={start.get(key)!r}; "
                    f"this resume has {settings[key]!r}"
                )
    elif journal.exists():
        journal.start(settings)  # raises: resume it or pick another directory
    check_trainers(jobs)
    # the cluster's history, built once, here (the live cluster's settings are the
    # default users', on ``nodes`` nodes), and one agent for the dry run and the run: a
    # policy file is read once
    history = resolve_history(ClusterConfig(num_nodes=nodes), [spec])
    built = build(spec, history)
    dry_run(spec, built, jobs, nodes, tick_seconds)
    processes.reap()  # what killed drivers left running

    import ray

    started_here = not ray.is_initialized()
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    elif started_here:
        pool_mod.start_local_ray(nodes)
    try:
        pool = pool_mod.RayPool(nodes, resource or pool_mod.NODE_RESOURCE, threads)
        atomic_write(out / "workers.json", json.dumps({"pids": pool.pids}).encode())
        if started_here and address is None:
            processes.record()
        bar = _Bar(jobs, progress, out / "tb")
        live = LiveCluster(jobs, pool, nodes, tick_seconds, journal, on_tick=bar.update)
        if resume:
            live.resume(start["probes"], ticks)
        else:
            probes = pool.probe([j.spec() for j in jobs.jobs], seconds=min(1.0, tick_seconds / 4))
            live.resume(probes, [])
            journal.start({**settings, "jobs_file": str(jobs.path), "probes": probes})
        note = spec_note(spec, live.config)
        if note:
            print(note, file=sys.stderr)
        metrics = _drive(spec, live, built)
        bar.close()
        pool.shutdown()
    finally:
        if started_here and ray.is_initialized():
            ray.shutdown()
            processes.forget()
    return write_live_outputs(live, scheduler, metrics, out)


def _drive(spec: str, live: LiveCluster, built: Any = None) -> dict[str, Any]:
    from mara_agents.evaluation.runner import run_spec

    try:
        return run_spec(spec, live.config, None, 0, record=True, built=built, backend=live)
    except NotImplementedError as exc:
        raise SpecError(f"{spec!r} cannot run live: {exc}") from None


def check_trainers(jobs: JobFile) -> None:
    """Build each distinct trainer and parameters of the job file once, so that a
    parameter outside the trainer's own limits (a batch larger than its data) is refused
    before Ray starts, in one line naming the job."""
    from mara_agents.live.trainers import make_trainer

    seen: set[str] = set()
    for job in jobs.jobs:
        key = json.dumps([job.trainer, job.params], sort_keys=True, default=repr)
        if key in seen:
            continue
        seen.add(key)
        try:
            make_trainer(job.trainer, job.params, job.seed)
        except Exception as exc:  # a user's trainer may raise anything while it builds
            why = (str(exc).splitlines() or [""])[0]
            kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
            raise JobFileError(f"{jobs.path}: job {job.name!r}: {kind}{why}") from None


class _DryStop(Exception):
    """The dry run has played its ticks."""


class DryPool:
    """Slices that train nothing: every job gains 10 steps a node and a falling loss."""

    def __init__(self, families: Iterable[str]) -> None:
        self.families = list(families)
        self.steps = [0] * len(self.families)

    def probe(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"loss0": 1.0, "steps_per_s": 10.0, "family": f} for f in self.families]

    def run(self, slices: list[Slice], seconds: float) -> dict[int, dict[str, Any]]:
        out = {}
        for s in slices:
            gain = 10 * len(s.nodes)
            self.steps[s.task] += gain
            steps = self.steps[s.task]
            out[s.task] = {
                "status": "ok",
                "steps": steps,
                "slice_steps": gain,
                "evals": [[steps, 1.0 / (1.0 + steps / 100)]],
                "passed": False,
                "state": None,
                "setup_s": 0.0,
            }
        return out


def dry_run(spec: str, built: Any, jobs: JobFile, nodes: int, tick_seconds: float) -> None:
    """Play ``DRY_TICKS`` ticks with active jobs of ``spec`` on a :class:`DryPool`:
    raises :class:`SpecError` if the scheduler cannot run on a live cluster."""
    from mara_agents.live.trainers import trainer_class

    families = [str(getattr(trainer_class(j.trainer), "family", "custom")) for j in jobs.jobs]
    busy = []

    def stop(live: LiveCluster) -> None:
        busy.append(bool(len(live.active())) or bool((live.node_task >= 0).any()))
        if sum(busy) >= DRY_TICKS:
            raise _DryStop

    dry = LiveCluster(jobs, DryPool(families), nodes, tick_seconds, on_tick=stop)
    try:
        _drive(spec, dry, built)
    except _DryStop:
        pass


def write_live_outputs(
    live: LiveCluster, scheduler: str, metrics: dict[str, Any], out: Path
) -> pd.DataFrame:
    """Every output file of a live run (the results table is returned)."""
    from mara_agents.evaluation.report import plot_allocation, summary_markdown
    from mara_agents.evaluation.runner import results_row

    allocation = metrics.pop("allocation", None)
    df = pd.DataFrame([results_row(scheduler, live.jobs.load, 0, 0, metrics)])
    _write_csv(df, out / "results.csv")
    atomic_write(out / "summary.md", summary_markdown(df, scheduler).encode())
    _write_csv(job_table(live), out / "jobs.csv")
    _write_csv(pd.DataFrame(live.slices), out / "slices.csv")
    _write_csv(curve_table(live), out / "curves.csv")
    rate, alpha = live.workload.rate, live.workload.alpha
    names = [j.name for j in live.jobs.jobs]
    fitted = pd.DataFrame({"job": names, "rate_steps_per_tick": rate, "alpha": alpha})
    _write_csv(fitted, out / "throughput.csv")
    if allocation is not None and len(allocation):
        title = (
            f"{scheduler} live: {metrics['completed']}/{metrics['tasks']} jobs completed, "
            f"{metrics['reassignments']} re-assignments (white = idle)"
        )
        plot_allocation([(title, np.asarray(allocation))], out / "gantt.png")
    return df


def job_table(live: LiveCluster) -> pd.DataFrame:
    """One row per job: its settings, outcome, steps, final loss and error."""
    rows = []
    for k, job in enumerate(live.jobs.jobs):
        if k in live.failed:
            outcome = "failed"
        elif live.status[k] == DONE:
            outcome = "completed"
        elif live.status[k] == EXPIRED:
            outcome = "expired"
        else:
            outcome = "active"
        rows.append(
            {
                "job": job.name,
                "trainer": job.trainer,
                "family": live.task_families()[k],
                "arrival": job.arrival,
                "deadline": job.deadline,
                "target": job.target,
                "cap": job.cap,
                "outcome": outcome,
                "finish_tick": int(live.finish_tick[k]),
                "steps": float(live.work[k]),
                "initial_loss": float(live.loss0[k]),
                "final_loss": float(live.reported[k]),
                "node_ticks": int(live.node_ticks_used[k]),
                "error": live.failed.get(k, ""),
            }
        )
    return pd.DataFrame(rows)


def curve_table(live: LiveCluster) -> pd.DataFrame:
    """Each job's evaluations (its real held-out loss every ``eval_every`` steps, and
    before training), in the trace library's columns."""
    rows = []
    for k, job in enumerate(live.jobs.jobs):
        source = f"live;trainer={job.trainer};seed={job.seed}" + "".join(
            f";{key}={value}" for key, value in sorted(job.params.items())
        )
        for s, v in live.evals[k]:
            rows.append(
                {
                    "trace_id": job.name,
                    "family": live.task_families()[k],
                    "source": source,
                    "step": s,
                    "loss": v,
                }
            )
    return pd.DataFrame(rows, columns=["trace_id", "family", "source", "step", "loss"])


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write(path, df.to_csv(index=False).encode())


class _Bar:
    """The progress line (tqdm) and the TensorBoard scalars, tick by tick."""

    def __init__(self, jobs: JobFile, enabled: bool, tb_dir: Path) -> None:
        from mara_agents.scalars import ScalarWriter

        self.jobs = jobs
        self.total = max(j.deadline for j in jobs.jobs)
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc="live ticks", unit="tick")
        tb_dir.mkdir(parents=True, exist_ok=True)
        self._writer = ScalarWriter(tb_dir)

    def update(self, live: LiveCluster) -> None:
        summary = live.tick_summary()
        scalars = {f"live/{k}": v for k, v in summary.items() if k != "tick"}
        for s in live.slices:
            if s["tick"] == summary["tick"] - 1 and s["status"] == "ok" and s["evals"]:
                scalars[f"loss/{s['job']}"] = s["loss"]
                scalars[f"steps/{s['job']}"] = s["steps"]
        self._writer.add(summary["tick"], scalars)
        self._writer.flush()
        if self._bar is not None:
            self._bar.update(max(0, min(summary["tick"], self.total) - self._bar.n))
            self._bar.set_postfix({k: v for k, v in summary.items() if k != "tick"})

    def close(self) -> None:
        self._writer.close()
        if self._bar is not None:
            self._bar.close()
