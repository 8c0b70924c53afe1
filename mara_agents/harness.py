"""Evaluation harness: every scheduler on the same episodes, in parallel, with statistics.

A *spec* names what to evaluate:

* ``NAME`` or ``NAME:key=value:key=value``: a scheduler from
  :data:`mara_agents.baselines.ALL_SCHEDULERS` or, for your own, the import path
  ``package.module.Class`` of a :class:`~mara_env.schedulers.Scheduler` subclass
  (constructor keyword arguments after the colons), run on the simulator directly (the
  fast path);
* ``PREFIX=ARG``: an env-driven agent made by the factory registered for ``PREFIX`` with
  :func:`register_agent_factory` (e.g. ``mara=policy.pt`` once the policy registers
  ``mara``).  The agent has ``reset(env, seed)`` and ``act(env, agent) -> action`` and
  is driven through ``mara_env.env.raw_env``; ``env=NAME`` drives a scheduler this way.

Episode ``i`` at load ``rho`` under base seed ``s`` uses the seed
:func:`episode_seed` ``(s, rho, i)`` for every spec (common random numbers), so paired
differences between schedulers are meaningful and results do not depend on the number
of worker processes.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, SchedulerAgent, run_episode
from mara_env.traces import TraceSet, load_traces

REFERENCE = "lara"
METRICS = (
    "tasks",
    "completed",
    "expired",
    "utilisation",
    "wasted_node_ticks",
    "warmup_node_ticks",
    "expired_node_ticks",
    "reassignments",
    "ticks",
)
COLUMNS = ("scheduler", "load", "episode", "seed", "completion_rate", *METRICS, "base_seed")
# then, per trace family F of the library: tasks_F, completed_F (ClusterSim.metrics)
FAMILY_PREFIXES = ("tasks_", "completed_")


class SpecError(ValueError):
    """A scheduler/agent spec names nothing known; the message lists what is known."""


class Agent(Protocol):
    """An env-driven decision maker (e.g. a learned policy).

    An agent may also have a ``num_slots`` attribute: the number of task slots it was
    built to observe.  The harness then runs its episodes in an env with that many slots;
    the workload of a seed does not depend on the slot count, so every scheduler still
    sees the same tasks.
    """

    def reset(self, env: Any, seed: int) -> None:
        """Called right after ``env.reset(seed=seed)``."""

    def act(self, env: Any, agent: str) -> int:
        """Action of ``agent``, the env's current agent."""


AgentFactory = Callable[[str], Agent]
# prefix -> factory, or "module:function" imported lazily (so it also works in workers
# started with the spawn method and costs nothing until used).
_AGENT_FACTORIES: dict[str, AgentFactory | str] = {}


def register_agent_factory(prefix: str, factory: AgentFactory | str) -> None:
    """Make ``PREFIX=ARG`` specs build agents with ``factory(ARG)``.

    ``factory`` is a callable or an import path ``"package.module:function"``; prefer
    the path form: it is resolved inside each worker process.
    """
    if not prefix.isidentifier():
        raise ValueError(f"agent prefix {prefix!r} must be an identifier")
    _AGENT_FACTORIES[prefix] = factory


def _scheduler_agent(name: str) -> Agent:
    return SchedulerAgent(make_scheduler(name))


register_agent_factory("env", _scheduler_agent)
# the learned policy: ``mara=POLICY.pt``, or plain ``mara`` for the shipped policy
register_agent_factory("mara", "mara_agents.export:make_agent")
ALIASES = {"mara": "mara="}


def resolve(spec: str) -> str:
    """A spec with aliases expanded (plain ``mara`` is the shipped policy)."""
    return ALIASES.get(spec, spec)


def known_specs() -> list[str]:
    """Scheduler names and agent prefixes (``PREFIX=...``) that specs may use."""
    from mara_agents.baselines import ALL_SCHEDULERS

    return [
        *ALL_SCHEDULERS,
        "package.module.SchedulerClass",
        *(f"{p}=..." for p in _AGENT_FACTORIES),
    ]


def _scheduler_class(name: str) -> type[Scheduler]:
    """A built-in scheduler by name, or ``package.module.Class`` imported (your own)."""
    from mara_agents.baselines import ALL_SCHEDULERS

    if name in ALL_SCHEDULERS:
        return ALL_SCHEDULERS[name]
    if "." not in name:
        raise SpecError(f"unknown scheduler {name!r}; known: {', '.join(known_specs())}")
    module, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise SpecError(
            f"scheduler {name!r}: cannot import module {module!r} ({exc}); is its directory "
            "on PYTHONPATH?"
        ) from None
    except AttributeError:
        raise SpecError(f"scheduler {name!r}: module {module!r} has no {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise SpecError(f"scheduler {name!r} is not a subclass of mara_env.schedulers.Scheduler")
    return cls


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def make_scheduler(spec: str) -> Scheduler:
    """Build the scheduler named by ``NAME[:key=value...]``; ``NAME`` is a built-in
    scheduler or the import path ``package.module.Class`` of a :class:`Scheduler`
    subclass (imported in every worker process)."""
    name, *params = spec.split(":")
    cls = _scheduler_class(name)
    kwargs = {}
    for p in params:
        key, eq, value = p.partition("=")
        if not eq:
            raise SpecError(f"scheduler spec {spec!r}: parameter {p!r} is not key=value")
        kwargs[key] = _parse_value(value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"scheduler spec {spec!r}: {exc}") from None


def make_agent(spec: str) -> Agent:
    """Build the env-driven agent named by ``PREFIX=ARG``."""
    prefix, _, arg = spec.partition("=")
    factory = _AGENT_FACTORIES.get(prefix)
    if factory is None:
        raise SpecError(f"unknown agent prefix {prefix!r}; known: {', '.join(known_specs())}")
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(arg)


def check_spec(spec: str) -> None:
    """Raise :class:`SpecError` now (in the parent) for a spec that cannot be built."""
    if "=" in spec.split(":")[0]:
        prefix = spec.partition("=")[0]
        if prefix not in _AGENT_FACTORIES:
            raise SpecError(f"unknown agent prefix {prefix!r}; known: {', '.join(known_specs())}")
    else:
        make_scheduler(spec)


def run_agent_episode(
    agent: Agent, config: ClusterConfig, traces: TraceSet, seed: int, record: bool = False
) -> dict:
    """One episode of an env-driven agent through ``raw_env``; returns its metrics.

    With ``record`` the metrics also hold ``allocation`` (ticks x nodes task indices).
    """
    from mara_env.env import raw_env

    slots = getattr(agent, "num_slots", None)
    if slots is not None and slots != config.num_slots:
        config = replace(config, num_slots=int(slots))
    env = raw_env(config=config, trace_set=traces)
    env.engine.sim.record = record
    env.reset(seed=seed)
    agent.reset(env, seed)
    for name in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else agent.act(env, name))
    sim = env.engine.sim
    out: dict[str, Any] = sim.metrics()
    if record:
        out["allocation"] = np.array(sim.assign_log)
    return out


def run_spec(
    spec: str, config: ClusterConfig, traces: TraceSet, seed: int, record: bool = False
) -> dict:
    """Metrics of one episode of ``spec`` (scheduler fast path or env-driven agent)."""
    if "=" in spec.split(":")[0]:
        return run_agent_episode(make_agent(spec), config, traces, seed, record)
    return run_episode(make_scheduler(spec), config, traces, seed, record)


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


def _init_worker(config: ClusterConfig, traces: TraceSet | None) -> None:
    _WORKER["config"] = config
    _WORKER["traces"] = (
        traces
        if traces is not None
        else load_traces(
            config.traces, split=config.split, families=list(config.families or []) or None
        )
    )


def _run_job(job: Job) -> list[dict]:
    return _job_rows(job, _WORKER["config"], _WORKER["traces"])


def _job_rows(job: Job, config: ClusterConfig, traces: TraceSet) -> list[dict]:
    config = config.replace(load=job.load)
    rows = []
    for episode, base, seed in job.episodes:
        m = run_spec(job.spec, config, traces, seed)
        rows.append(
            {
                "scheduler": job.spec,
                "load": job.load,
                "episode": episode,
                "seed": seed,
                "completion_rate": m["completion_rate"],
                **{k: m[k] for k in METRICS},
                "base_seed": base,
                **{k: v for k, v in m.items() if k.startswith(FAMILY_PREFIXES)},
            }
        )
    return rows


def _run_on_ray(
    jobs: list[Job], config: ClusterConfig, traces: TraceSet | None, address: str, bar: Any
) -> list[dict]:
    """Run the jobs as Ray tasks on an existing cluster, in job order."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    if traces is None:
        families = list(config.families or []) or None
        traces = load_traces(config.traces, split=config.split, families=families)
    remote = ray.remote(num_cpus=1)(_job_rows)
    config_ref, traces_ref = ray.put(config), ray.put(traces)
    pending = [remote.remote(job, config_ref, traces_ref) for job in jobs]
    rows: list[dict] = []
    for job, ref in zip(jobs, pending):
        rows += ray.get(ref)
        bar.update(len(job.episodes))
    return rows


def make_jobs(
    specs: Sequence[str], loads: Sequence[float], episodes: int, seeds: Sequence[int], chunk: int
) -> list[Job]:
    """Work split into chunks of at most ``chunk`` episodes."""
    jobs = []
    for spec in specs:
        for load in loads:
            eps = [
                (j * episodes + i, s, episode_seed(s, load, i))
                for j, s in enumerate(seeds)
                for i in range(episodes)
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
) -> pd.DataFrame:
    """Run every spec on the same episodes; one row per spec x load x episode.

    ``config`` sets the cluster (its ``traces``/``split`` pick the library unless
    ``traces`` is given; its ``load`` is replaced by each of ``loads``).  With
    ``out_dir`` also writes ``results.csv``, ``summary.md``, ``completion_vs_load.png``
    and TensorBoard scalars under ``tb/`` (see :func:`write_outputs`).
    With ``address`` the episodes run as Ray tasks on that cluster (``"auto"``, or
    ``host:port`` of a head started with ``ray start --head``); results are identical.
    """
    names = list(specs)
    specs = [resolve(s) for s in specs]
    for spec in specs:
        check_spec(spec)
    config = config or ClusterConfig()
    workers = max(1, int(workers or os.cpu_count() or 1))
    total = len(specs) * len(loads) * episodes * len(seeds)
    chunk = max(1, min(8, math.ceil(episodes * len(seeds) / max(1, 2 * workers))))
    jobs = make_jobs(specs, loads, episodes, seeds, chunk)
    bar = _progress_bar(total, progress)
    rows: list[dict] = []
    if address is not None:
        rows = _run_on_ray(jobs, config, traces, address, bar)
    elif workers == 1:
        _init_worker(config, traces)
        for job in jobs:
            rows += _run_job(job)
            bar.update(len(job.episodes))
    else:
        pool = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(config, traces))
        with pool as ex:
            for job, got in zip(jobs, ex.map(_run_job, jobs)):
                rows += got
                bar.update(len(job.episodes))
    bar.close()
    extra = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in COLUMNS]
    df = pd.DataFrame(rows, columns=[*COLUMNS, *extra])
    df["scheduler"] = df["scheduler"].map(dict(zip(specs, names)))
    df = df.sort_values(["load", "episode"], kind="stable")
    order = {s: i for i, s in enumerate(names)}
    df = df.sort_values("scheduler", key=lambda s: s.map(order), kind="stable")
    df = df.reset_index(drop=True)
    if out_dir is not None:
        write_outputs(df, out_dir)
    return df


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="ep", desc="evaluate", disable=not enabled)


# ---- statistics -----------------------------------------------------------------------
def mean_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its two-sided t confidence interval (nan for n < 2)."""
    from scipy import stats

    x = np.asarray(values, np.float64)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return (float(x.mean()) if len(x) else float("nan")), float("nan")
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def summarise(df: pd.DataFrame, metric: str = "completion_rate") -> pd.DataFrame:
    """Mean, 95% CI half-width and n per scheduler x load (spec order kept)."""
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        m, h = mean_ci(g[metric].to_numpy())
        rows.append({"scheduler": spec, "load": load, "mean": m, "ci95": h, "n": len(g)})
    return pd.DataFrame(rows)


def paired_differences(
    df: pd.DataFrame, reference: str, metric: str = "completion_rate"
) -> pd.DataFrame:
    """Per scheduler x load: mean of (scheduler - reference) over shared episodes, 95% CI."""
    key = ["load", "base_seed", "episode"]
    ref = df[df["scheduler"] == reference].set_index(key)[metric]
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        if spec == reference:
            continue
        d = g.set_index(key)[metric] - ref
        m, h = mean_ci(d.dropna().to_numpy())
        n = int(d.notna().sum())
        rows.append({"scheduler": spec, "load": load, "diff": m, "ci95": h, "n": n})
    return pd.DataFrame(rows)


def _families(df: pd.DataFrame) -> list[str]:
    """Trace families with ``tasks_<family>`` columns in ``df``, in column order."""
    prefix = FAMILY_PREFIXES[0]
    return [c[len(prefix) :] for c in df.columns if c.startswith(prefix)]


def family_rates(df: pd.DataFrame) -> pd.DataFrame:
    """Completion rate per scheduler x load x trace family, pooled over episodes
    (completed / tasks of that family); empty without the ``tasks_<family>`` columns."""
    families = _families(df)
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        for fam in families:
            n = int(g[f"tasks_{fam}"].sum())
            done = int(g[f"completed_{fam}"].sum())
            rate = done / n if n else float("nan")
            rows.append({"scheduler": spec, "load": load, "family": fam, "rate": rate, "tasks": n})
    return pd.DataFrame(rows, columns=["scheduler", "load", "family", "rate", "tasks"])


def family_paired_differences(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per scheduler x load x family: pooled completion rate minus ``reference``'s on the
    same episodes (the same tasks), with a 95% t-interval over episodes for this ratio
    estimate (linearised: episode e contributes ``(d_e - diff * n_e) / mean(n)``, where
    ``d_e`` is the difference in completed tasks of the family and ``n_e`` their number)."""
    families = _families(df)
    key = ["load", "base_seed", "episode"]
    ref = df[df["scheduler"] == reference].set_index(key)
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        if spec == reference:
            continue
        g = g.set_index(key)
        for fam in families:
            n = g[f"tasks_{fam}"].to_numpy(np.float64)
            d = (g[f"completed_{fam}"] - ref.loc[g.index, f"completed_{fam}"]).to_numpy(float)
            if n.sum() == 0:
                diff, half = float("nan"), float("nan")
            else:
                diff = d.sum() / n.sum()
                _, half = mean_ci(diff + (d - diff * n) / n.mean())
            rows.append(
                {"scheduler": spec, "load": load, "family": fam, "diff": diff, "ci95": half}
            )
    return pd.DataFrame(rows, columns=["scheduler", "load", "family", "diff", "ci95"])


def family_markdown(df: pd.DataFrame) -> list[str]:
    """Lines of the per-family table of ``summary.md`` (none when there is one family)."""
    rates = family_rates(df)
    families = list(dict.fromkeys(rates["family"]))
    if len(families) < 2:
        return []
    lines = [
        "",
        "## Completion rate by trace family (pooled over episodes)",
        "",
        "| scheduler | load | " + " | ".join(families) + " |",
        "|---|---|" + "---|" * len(families),
    ]
    for (spec, load), g in rates.groupby(["scheduler", "load"], sort=False):
        cells = [f"{r:.3f} (n={n})" for r, n in zip(g["rate"], g["tasks"])]
        lines.append(f"| {spec} | {load:g} | " + " | ".join(cells) + " |")
    specs = list(dict.fromkeys(df["scheduler"]))
    if REFERENCE not in specs or len(specs) < 2:
        return lines
    lines += [
        "",
        f"### Paired difference by trace family vs {REFERENCE} (same tasks; 95% t-interval)",
        "",
        "| scheduler | load | " + " | ".join(families) + " |",
        "|---|---|" + "---|" * len(families),
    ]
    diffs = family_paired_differences(df, REFERENCE)
    for (spec, load), g in diffs.groupby(["scheduler", "load"], sort=False):
        cells = [_fmt(m, h) for m, h in zip(g["diff"], g["ci95"])]
        lines.append(f"| {spec} | {load:g} | " + " | ".join(cells) + " |")
    return lines


def _fmt(m: float, h: float) -> str:
    return f"{m:.3f} ± {h:.3f}" if np.isfinite(h) else f"{m:.3f}"


def summary_markdown(df: pd.DataFrame) -> str:
    """The ``summary.md`` text: completion rate and other metrics, and paired differences."""
    specs = list(dict.fromkeys(df["scheduler"]))
    loads = sorted(df["load"].unique())
    reference = REFERENCE if REFERENCE in specs else specs[0]
    n_eps = df.groupby(["scheduler", "load"]).size().min()
    lines = [
        "# Evaluation summary",
        "",
        f"{n_eps} episodes per scheduler and load; mean ± half-width of the 95% t-interval.",
        "",
        "## Completion rate",
        "",
        "| scheduler | " + " | ".join(f"load {x:g}" for x in loads) + " |",
        "|---|" + "---|" * len(loads),
    ]
    s = summarise(df).set_index(["scheduler", "load"])
    for spec in specs:
        cells = [_fmt(s.at[(spec, x), "mean"], s.at[(spec, x), "ci95"]) for x in loads]
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    if len(specs) > 1:
        lines += [
            "",
            f"## Paired difference vs {reference} (same episodes)",
            "",
            "| scheduler | " + " | ".join(f"load {x:g}" for x in loads) + " |",
            "|---|" + "---|" * len(loads),
        ]
        d = paired_differences(df, reference).set_index(["scheduler", "load"])
        for spec in specs:
            if spec == reference:
                continue
            cells = [_fmt(d.at[(spec, x), "diff"], d.at[(spec, x), "ci95"]) for x in loads]
            lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    lines += family_markdown(df)
    lines += ["", "## Other metrics (mean per episode)", ""]
    cols = ("utilisation", "wasted_node_ticks", "reassignments", "expired", "tasks")
    lines += ["| scheduler | load | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    means = df.groupby(["scheduler", "load"], sort=False)[list(cols)].mean()
    for (spec, load), r in means.iterrows():
        vals = [f"{r['utilisation']:.3f}", *(f"{r[c]:.1f}" for c in cols[1:])]
        lines.append(f"| {spec} | {load:g} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


# ---- outputs ------------------------------------------------------------------------
def write_outputs(df: pd.DataFrame, out_dir: str | os.PathLike) -> None:
    """``results.csv``, ``summary.md``, ``completion_vs_load.png``,
    ``completion_by_family.png`` (with two or more trace families) and ``tb/`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "results.csv", index=False)
    (out / "summary.md").write_text(summary_markdown(df))
    plot_completion(df, out / "completion_vs_load.png")
    plot_families(df, out / "completion_by_family.png")
    write_tensorboard(df, out / "tb")


def plot_completion(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Completion rate vs load, one line per scheduler with 95% CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarise(df)
    fig, ax = plt.subplots(figsize=(6, 4))
    for spec, g in s.groupby("scheduler", sort=False):
        yerr = g["ci95"].fillna(0)
        ax.errorbar(g["load"], g["mean"], yerr=yerr, marker="o", capsize=3, label=spec)
    ax.set_xlabel("load factor ρ")
    ax.set_ylabel("completion rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_families(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Completion rate per trace family (pooled), one panel per load, one bar per scheduler;
    nothing is written with fewer than two families."""
    rates = family_rates(df)
    families = list(dict.fromkeys(rates["family"]))
    if len(families) < 2:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    specs = list(dict.fromkeys(rates["scheduler"]))
    loads = sorted(rates["load"].unique())
    fig, axes = plt.subplots(1, len(loads), figsize=(4 * len(loads), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    width = 0.8 / len(specs)
    x = np.arange(len(families))
    table = rates.set_index(["scheduler", "load", "family"])["rate"]
    for ax, load in zip(axes, loads):
        for i, spec in enumerate(specs):
            y = [table.get((spec, load, f), np.nan) for f in families]
            ax.bar(x + (i - (len(specs) - 1) / 2) * width, y, width, label=spec)
        ax.set_xticks(x, families)
        ax.set_title(f"load {load:g}")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("completion rate (pooled)")
    axes[-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_tensorboard(df: pd.DataFrame, log_dir: str | os.PathLike) -> None:
    """Scalars ``eval/<metric>/<scheduler>`` (mean per load, step = round(100 * load)).

    Written with the ``tensorboard`` package's event writer: ``tensorboardX`` and
    ``torch.utils.tensorboard`` would import torch.
    """
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(log_dir))
    means = df.groupby(["scheduler", "load"], sort=False)[["completion_rate", *METRICS]].mean()
    for (spec, load), row in means.iterrows():
        tag_spec = spec.replace("=", "_").replace(":", "_")
        values = [
            Summary.Value(tag=f"eval/{metric}/{tag_spec}", simple_value=float(row[metric]))
            for metric in ("completion_rate", *METRICS)
        ]
        writer.add_event(Event(step=int(round(100 * load)), summary=Summary(value=values)))
    writer.close()
