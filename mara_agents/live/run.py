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
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mara_agents.evaluation.registry import (
    SpecError,
    check_spec,
    expand_alias,
    is_bound_spec,
    spec_note,
)
from mara_agents.live.cluster import LiveCluster
from mara_agents.live.jobfile import JobFile, load_job_file
from mara_agents.live.journal import Journal, JournalError, atomic_write
from mara_env.cluster import DONE, EXPIRED

SETTINGS = ("digest", "scheduler", "nodes", "tick_seconds")  # a resumed run must match these


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
    from mara_agents.live import pool as pool_mod

    out = Path(out)
    spec = expand_alias(scheduler)
    if is_bound_spec(spec):
        raise SpecError(f"{scheduler!r} is a bound computed from true work: it cannot run live")
    check_spec(spec)
    if not (isinstance(tick_seconds, (int, float)) and 0.2 <= tick_seconds <= 3600):
        raise ValueError(f"--tick-seconds {tick_seconds}: expected seconds in [0.2, 3600]")
    jobs = load_job_file(job_file, tick_seconds, nodes)
    journal = Journal(out)
    settings = {
        "digest": jobs.digest,
        "scheduler": scheduler,
        "nodes": nodes,
        "tick_seconds": float(tick_seconds),
    }
    start, ticks = None, []
    if resume:
        start, ticks = journal.read()
        for key in SETTINGS:
            if start.get(key) != settings[key]:
                raise JournalError(
                    f"{journal.path}: the run was started with {key}={start.get(key)!r}; "
                    f"this resume has {settings[key]!r}"
                )
    elif journal.exists():
        journal.start(settings)  # raises: resume it or pick another directory

    import ray

    started_here = not ray.is_initialized()
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    elif started_here:
        pool_mod.start_local_ray(nodes)
    try:
        pool = pool_mod.RayPool(nodes, resource or pool_mod.NODE_RESOURCE, threads)
        atomic_write(out / "workers.json", json.dumps({"pids": pool.pids}).encode())
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
        metrics = _drive(spec, live)
        bar.close()
        pool.shutdown()
    finally:
        if started_here and ray.is_initialized():
            ray.shutdown()
    return write_live_outputs(live, scheduler, metrics, out)


def _drive(spec: str, live: LiveCluster) -> dict[str, Any]:
    from mara_agents.evaluation.runner import run_spec

    try:
        return run_spec(spec, live.config, None, 0, record=True, backend=live)
    except NotImplementedError as exc:
        raise SpecError(f"{spec!r} cannot run live: {exc}") from None


def write_live_outputs(
    live: LiveCluster, scheduler: str, metrics: dict[str, Any], out: Path
) -> pd.DataFrame:
    """Every output file of a live run (the results table is returned)."""
    from mara_agents.evaluation.report import plot_allocation, summary_markdown
    from mara_agents.evaluation.stats import COLUMNS

    allocation = metrics.pop("allocation", None)
    row = {"scheduler": scheduler, "load": live.jobs.load, "episode": 0, "seed": 0}
    row.update(metrics)
    row["base_seed"] = 0
    order = [*COLUMNS, *[k for k in row if k not in COLUMNS]]
    df = pd.DataFrame([row])[order]
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
    """Each job's real held-out loss against its steps, in the trace library's columns."""
    rows = []
    for k, job in enumerate(live.jobs.jobs):
        work, loss = live.history(k)
        steps = np.r_[0.0, work]
        losses = np.r_[live.loss0[k], loss]
        keep = np.r_[True, np.diff(steps) > 0]  # a lost slice reports no new step
        source = f"live;trainer={job.trainer};seed={job.seed}" + "".join(
            f";{key}={value}" for key, value in sorted(job.params.items())
        )
        for s, v in zip(steps[keep], losses[keep]):
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
            if s["tick"] == summary["tick"] - 1 and s["status"] == "ok":
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
