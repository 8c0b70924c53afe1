"""Running evaluation episodes: every spec on the same episodes, in worker processes or on Ray.

Episode ``i`` at load ``rho`` under base seed ``s`` uses the seed
:func:`episode_seed` ``(s, rho, i)`` for every spec (common random numbers), so paired
differences between schedulers are meaningful and results do not depend on the number
of worker processes.  Specs are resolved by :mod:`mara_agents.evaluation.registry` and checked
before any episode runs; :func:`evaluate` returns the results table of
:mod:`mara_agents.evaluation.stats` and can write the reports of
:mod:`mara_agents.evaluation.report`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mara_agents.evaluation.registry import (
    Agent,
    Bound,
    SpecError,
    check_spec,
    expand_alias,
    is_agent_spec,
    is_bound_spec,
    make_agent,
    make_bound,
    make_scheduler,
    spec_note,
)
from mara_agents.evaluation.report import REFERENCE, write_outputs
from mara_agents.evaluation.stats import COLUMNS, DAY, FAMILY_PREFIXES, METRICS
from mara_agents.planning.history import ClusterHistory, HistoryError
from mara_env.atomic import atomic_write, signals_deferred
from mara_env.cluster import ClusterState
from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, SchedulerAgent, run_episode
from mara_env.threads import single_threaded
from mara_env.traces import TraceSet, load_traces


def run_agent_episode(
    agent: Agent,
    config: ClusterConfig,
    traces: TraceSet | None,
    seed: int,
    record: bool = False,
    backend: ClusterState | None = None,
) -> dict:
    """One episode of an env-driven agent through ``raw_env`` (over ``backend`` if given,
    e.g. a live cluster) with as many slots as ``agent.slots_for`` asks, by the episode
    loop :func:`mara_env.round_env.play_episode`; returns its metrics.  With ``record`` the
    metrics also hold ``allocation`` (ticks x nodes task indices)."""
    from mara_env.cluster_env import raw_env
    from mara_env.round_env import play_episode

    slots = agent.slots_for(config.num_nodes)
    if slots is not None and slots != config.num_slots:
        config = replace(config, num_slots=int(slots))
    env = raw_env(config=config, trace_set=traces, backend=backend)
    env.engine.sim.record = record or env.engine.sim.record
    play_episode(agent, env, seed)
    sim = env.engine.sim
    out: dict[str, Any] = sim.metrics()
    if record:
        out["allocation"] = np.array(sim.assign_log)
    return out


def run_spec(
    spec: str,
    config: ClusterConfig,
    traces: TraceSet,
    seed: int,
    record: bool = False,
    built: Agent | Scheduler | Bound | None = None,
    backend: ClusterState | None = None,
) -> dict:
    """Metrics of one episode of ``spec`` (scheduler fast path or env-driven agent);
    ``built``: the agent or scheduler :func:`build` made of ``spec`` (reset here), else
    built now; ``backend``: run on that cluster (a live one) instead of a simulator."""
    made = build(spec) if built is None else built
    if is_bound_spec(spec):  # a figure, not a schedule: nothing to record
        if backend is not None:
            raise SpecError(f"{spec!r} is a bound computed from true work: it cannot run live")
        return made(config, traces, seed)
    # An episode is a sequence of small decisions: more threads only contend, with each
    # other and with the other worker processes (a scheduler's CPU time up to 1.8x).
    with single_threaded():
        if is_agent_spec(spec):
            return run_agent_episode(made, config, traces, seed, record, backend)
        return run_episode(made, config, traces, seed, record, backend)


def build(spec: str, history: ClusterHistory | None = None) -> Agent | Scheduler | Bound:
    """The agent, scheduler or reference of ``spec``, to be reset for each of its episodes;
    one that reads the cluster's history (``use_history``) is handed ``history``."""
    if is_bound_spec(spec):
        return make_bound(spec)
    made = make_agent(spec) if is_agent_spec(spec) else make_scheduler(spec)
    reader = _history_reader(made)
    if history is not None and reader is not None:
        reader.use_history(history)
    return made


def _history_reader(made: Agent | Scheduler) -> Any:
    """What in ``made`` reads the cluster's history (a scheduler an ``env=`` agent drives,
    else ``made``), or None when it reads none."""
    target = made.scheduler if isinstance(made, SchedulerAgent) else made
    return target if hasattr(target, "use_history") else None


def history_readers(specs: Sequence[str]) -> dict[str, Any]:
    """Those of ``specs`` that read the cluster's history, each built here to ask, by spec
    (aliases expanded; their ``needs_tuning`` says whether they plan with its tuning: its
    price of a miss or its choice of distribution)."""
    readers = {}
    for spec in map(expand_alias, specs):
        reader = None if is_bound_spec(spec) else _history_reader(build(spec))
        if reader is not None and reader.reads_history:
            readers[spec] = reader
    return readers


def episode_seed(base_seed: int, load: float, episode: int) -> int:
    """Seed of episode ``episode`` at ``load`` under ``base_seed`` (same for every spec)."""
    ss = np.random.SeedSequence([int(base_seed), int(round(load * 1000)), int(episode)])
    return int(ss.generate_state(1, np.uint32)[0])


@dataclass(frozen=True)
class Job:
    """One (spec, load) batch of episodes for a worker."""

    spec: str
    load: float
    episodes: tuple[tuple[int, int, int], ...]  # (episode index, base seed, episode seed)


_WORKER: dict[str, Any] = {}


def _init_worker(
    config: ClusterConfig, traces: TraceSet | None, history: ClusterHistory | None
) -> None:
    _WORKER["config"] = config
    _WORKER["history"] = history
    _WORKER["built"] = {}
    _WORKER["traces"] = (
        traces
        if traces is not None
        else load_traces(
            config.traces, split=config.split, families=list(config.families or []) or None
        )
    )


def _run_job(job: Job) -> list[dict]:
    # one agent per spec and worker process: a policy file is read once, not per episode
    built = _WORKER["built"]
    if job.spec not in built:
        built[job.spec] = build(job.spec, _WORKER["history"])
    return _job_rows(job, _WORKER["config"], _WORKER["traces"], built[job.spec])


def _job_rows(
    job: Job,
    config: ClusterConfig,
    traces: TraceSet,
    built: Agent | Scheduler | Bound | None = None,
    history: ClusterHistory | None = None,
) -> list[dict]:
    config = config.replace(load=job.load)
    built = build(job.spec, history) if built is None else built
    rows = []
    for episode, base, seed in job.episodes:
        m = run_spec(job.spec, config, traces, seed, built=built)
        rows.append(results_row(job.spec, job.load, episode, seed, m, base))
    return rows


def results_row(
    spec: str, load: float, episode: int, seed: int, metrics: dict, base_seed: int = 0
) -> dict:
    """One row of the results table (:data:`~mara_agents.evaluation.stats.COLUMNS`, then
    the per-family metrics and a replayed day's :data:`~mara_agents.evaluation.stats.DAY`)
    from an episode's ``metrics`` (:func:`run_spec`'s)."""
    return {
        "scheduler": spec,
        "load": load,
        "episode": episode,
        "seed": seed,
        "completion_rate": metrics["completion_rate"],
        **{k: metrics[k] for k in METRICS},
        "base_seed": base_seed,
        **{k: v for k, v in metrics.items() if k.startswith(FAMILY_PREFIXES)},
        **({DAY: metrics[DAY]} if DAY in metrics else {}),
    }


def _run_on_ray(
    jobs: list[Job],
    config: ClusterConfig,
    traces: TraceSet | None,
    history: ClusterHistory | None,
    address: str,
    bar: Any,
) -> list[dict]:
    """Run the jobs as Ray tasks on an existing cluster, in job order."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    if traces is None:
        families = list(config.families or []) or None
        traces = load_traces(config.traces, split=config.split, families=families)
    remote = ray.remote(num_cpus=1)(_job_rows)
    config_ref, traces_ref, history_ref = ray.put(config), ray.put(traces), ray.put(history)
    pending = [remote.remote(job, config_ref, traces_ref, None, history_ref) for job in jobs]
    rows: list[dict] = []
    for job, ref in zip(jobs, pending):
        rows += ray.get(ref)
        bar.update(len(job.episodes))
    return rows


def make_jobs(
    specs: Sequence[str],
    loads: Sequence[float],
    episodes: int,
    seeds: Sequence[int],
    chunk: int,
    done: frozenset[tuple[str, float, int]] = frozenset(),
) -> list[Job]:
    """Work split into chunks of at most ``chunk`` episodes, but those in ``done``
    (spec, load, episode index)."""
    jobs = []
    for spec in specs:
        for load in loads:
            eps = [
                (j * episodes + i, s, episode_seed(s, load, i))
                for j, s in enumerate(seeds)
                for i in range(episodes)
                if (spec, float(load), j * episodes + i) not in done
            ]
            for a in range(0, len(eps), chunk):
                jobs.append(Job(spec, float(load), tuple(eps[a : a + chunk])))
    return jobs


def evaluate(
    specs: Sequence[str],
    loads: Sequence[float],
    episodes: int,
    seeds: Sequence[int] = (0,),
    config: ClusterConfig | None = None,
    traces: TraceSet | None = None,
    workers: int | None = None,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    address: str | None = None,
    reference: str = REFERENCE,
    resume: bool = False,
    history: ClusterHistory | None = None,
) -> pd.DataFrame:
    """Run every spec on the same episodes; one row per spec x load x episode.

    ``config`` sets the cluster (its ``traces``/``split`` pick the library unless
    ``traces`` is given; its ``load`` is replaced by each of ``loads``).  With
    ``out_dir`` also writes ``results.csv``, ``summary.md``, ``completion_vs_load.png``
    and TensorBoard scalars under ``tb/`` (see :func:`write_outputs`; the summary's paired
    differences are against ``reference``, one of ``specs`` as given).
    With ``address`` the episodes run as Ray tasks on that cluster (``"auto"``, or
    ``host:port`` of a head started with ``ray start --head``); results are identical.

    With ``out_dir``, the episodes run so far are kept in :data:`PARTIAL` there until the
    reports are written (also when the run is stopped); ``resume`` reuses the rows that
    file (or a finished run's ``results.csv``) holds and runs only the episodes missing.

    ``history``: the cluster's (:class:`~mara_agents.planning.history.ClusterHistory`),
    built here once (``ClusterHistory.of(config)``) unless given, where a spec reads one,
    and handed to every worker: none fits or tunes one.  A spec that plans with a tuning
    (a price of a miss, a choice of distribution) the history lacks is a
    :class:`~mara_agents.planning.history.HistoryError` before any episode
    (:func:`mara_agents.evaluation.tuning.resolve_history` tunes one).
    """
    names = list(specs)
    specs = [expand_alias(s) for s in specs]
    for spec in specs:
        check_spec(spec)
    config = config or ClusterConfig()
    if history is None or not history.tuned:
        readers = history_readers(specs)
        if history is None and readers:
            history = ClusterHistory.of(config)
        tuned = [
            n for n, spec in zip(names, specs) if spec in readers and readers[spec].needs_tuning
        ]
        if tuned:
            try:
                history.price()
                history.distribution()
            except HistoryError as exc:
                raise HistoryError(f"{', '.join(tuned)}: {exc}") from None
    for name, spec in zip(names, specs):
        note = spec_note(spec, config)
        if note:  # one line on stderr, in this process only: results stay as they are
            print(f"warning: {name}: {note}", file=sys.stderr, flush=True)
    workers = max(1, int(workers or os.cpu_count() or 1))
    total = len(specs) * len(loads) * episodes * len(seeds)
    chunk = max(1, min(8, math.ceil(episodes * len(seeds) / max(1, 2 * workers))))
    kept = Kept(out_dir, resume, dict(zip(names, specs)))
    jobs = make_jobs(specs, loads, episodes, seeds, chunk, kept.done())
    bar = progress_bar(total, progress)
    bar.update(len(kept.rows))
    try:
        if address is not None:
            kept.add(_run_on_ray(jobs, config, traces, history, address, bar))
        elif workers == 1:
            _init_worker(config, traces, history)
            for job in jobs:
                kept.add(_run_job(job))
                bar.update(len(job.episodes))
        else:
            _run_in_pool(jobs, config, traces, history, workers, kept, bar)
    except BaseException:  # stopped (Ctrl-C, SIGTERM) or failed: what ran is kept
        kept.save()
        raise
    finally:
        bar.close()
    rows = kept.rows
    extra = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in COLUMNS]
    df = pd.DataFrame(rows, columns=[*COLUMNS, *extra])
    df["scheduler"] = df["scheduler"].map(dict(zip(specs, names)))
    df = df.sort_values(["load", "episode"], kind="stable")
    order = {s: i for i, s in enumerate(names)}
    df = df.sort_values("scheduler", key=lambda s: s.map(order), kind="stable")
    df = df.reset_index(drop=True)
    _warn_empty_episodes(df)
    if out_dir is not None:
        write_outputs(df, out_dir, reference)
        kept.finish()
    return df


def _pool_context() -> multiprocessing.context.BaseContext:
    """The worker processes' start method: forkserver, not fork (a parent that has run
    torch, a policy or the flow model, holds an intra-op thread pool, and a forked child
    that uses torch can hang on it), its server started ignoring Ctrl-C, as its workers
    then do: a terminal's Ctrl-C reaches the whole process group, and a worker interrupted
    while it starts up prints a traceback; the parent alone stops on it, and stops them."""
    from multiprocessing import forkserver

    previous = signal.getsignal(signal.SIGINT)  # None: set outside Python, left alone
    if threading.current_thread() is not threading.main_thread() or previous is None:
        forkserver.ensure_running()
    else:
        # Blocked in this thread meanwhile, a Ctrl-C mostly waits for the handler again;
        # one that another thread takes in the ~10 ms of the spawn is ignored (press again).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the server inherits
            try:
                forkserver.ensure_running()
            finally:
                signal.signal(signal.SIGINT, previous)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return multiprocessing.get_context("forkserver")


def _run_in_pool(
    jobs: list[Job],
    config: ClusterConfig,
    traces: TraceSet | None,
    history: ClusterHistory | None,
    workers: int,
    kept: Kept,
    bar: Any,
) -> None:
    """Run the jobs in ``workers`` processes; a stopped run stops them at once, rather than
    waiting for the episodes queued (as leaving the executor's block would)."""
    pool = ProcessPoolExecutor(
        workers,
        mp_context=_pool_context(),
        initializer=_init_worker,
        initargs=(config, traces, history),
    )
    try:
        with signals_deferred():  # every worker started is known when a Ctrl-C acts
            results = pool.map(_run_job, jobs)
        for job, got in zip(jobs, results):
            kept.add(got)
            bar.update(len(job.episodes))
    except BaseException:
        processes = list((pool._processes or {}).values())  # no public handle on them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise
    pool.shutdown()


# The episodes an evaluation has run so far, kept in its --out until the reports are
# written: what `mara evaluate --resume` continues from.
PARTIAL = "results.partial.csv"
SAVE_EVERY_S = 10.0


class Kept:
    """The rows of the episodes run (those of an earlier run of the same evaluation, when
    resumed), saved to :data:`PARTIAL` in ``out_dir`` at most every
    :data:`SAVE_EVERY_S` seconds and when the run stops."""

    def __init__(
        self, out_dir: str | os.PathLike | None, resume: bool, specs: dict[str, str]
    ) -> None:
        self.path = None if out_dir is None else Path(out_dir) / PARTIAL
        self.rows: list[dict] = []
        self._saved = time.monotonic()
        if resume and self.path is not None:
            finished = self.path.with_name("results.csv")
            source = self.path if self.path.is_file() else finished
            if source.is_file():
                earlier = _earlier_rows(source)
                earlier["scheduler"] = earlier["scheduler"].map(lambda s: specs.get(s, s))
                self.rows = earlier.to_dict("records")

    def done(self) -> frozenset[tuple[str, float, int]]:
        """(spec, load, episode index) of every row kept."""
        return frozenset((r["scheduler"], float(r["load"]), int(r["episode"])) for r in self.rows)

    def add(self, rows: list[dict]) -> None:
        """Keep ``rows``; save them all when the last save is old enough."""
        self.rows += rows
        if time.monotonic() - self._saved > SAVE_EVERY_S:
            self.save()

    def save(self) -> None:
        """Write every row kept to :data:`PARTIAL` (nothing when there is none)."""
        if self.path is not None and self.rows:
            atomic_write(self.path, pd.DataFrame(self.rows).to_csv(index=False).encode())
            self._saved = time.monotonic()

    def finish(self) -> None:
        """The reports are written: the partial rows are no longer needed."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _earlier_rows(path: Path) -> pd.DataFrame:
    """The results rows a resumed run keeps, from ``path``; ValueError naming it when it
    is not a results table (a file edited or broken since)."""
    try:
        earlier = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{path}: not a results table ({why}); --force to start again") from None
    missing = [c for c in COLUMNS if c not in earlier.columns]
    if missing:
        raise ValueError(
            f"{path}: not a results table (no column {missing[0]!r}); --force to start again"
        )
    return earlier


def _warn_empty_episodes(df: pd.DataFrame) -> None:
    """One line on stderr per load with episodes in which no task arrived: their
    completion rate is undefined (nan in the results) and means and intervals leave them
    out, which a table of nan or of fewer episodes would otherwise leave unexplained."""
    for load, g in df.groupby("load", sort=False):
        episodes = g.drop_duplicates(["base_seed", "episode"])
        empty = int((episodes["tasks"] == 0).sum())
        if empty:
            print(
                f"warning: load {load:g}: no task arrived in {empty} of {len(episodes)} "
                "episodes (too low a load for this horizon); their completion rate is "
                "undefined (nan) and left out of means and intervals",
                file=sys.stderr,
                flush=True,
            )


def progress_bar(total: int, enabled: bool, desc: str = "evaluate") -> Any:
    """A progress bar of ``total`` episodes (tqdm's; silent unless ``enabled``)."""
    from tqdm import tqdm

    return tqdm(total=total, unit="ep", desc=desc, disable=not enabled)
