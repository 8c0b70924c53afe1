"""Learning-curve output of a training run: TensorBoard, CSV and a plot.

* :class:`MaraTensorBoard`, a Tune ``LoggerCallback`` that :func:`mara_agents.training.train.train`
  passes to the run, writes :func:`tensorboard_scalars` of every training iteration into
  an event file of the trial's directory (``events.out.tfevents.*.mara``), one tag scheme
  ``mara/...``, step = node decisions so far: the simulator's episode metrics
  (``mara/<metric>``), ``mara/node_decisions`` and ``mara/node_decisions_per_s``, and the
  learner's :data:`LEARNER_STATS` (``mara/learner/<name>``).  It lives here, next to the
  CSV and the plot, because all three read the same training result.  Tune's default
  loggers still write ``result.json`` (read below), ``progress.csv`` and RLlib's own
  ``ray/tune/...`` tags.
* :func:`write_learning_curves_csv`, :func:`learning_curves` and
  :func:`plot_learning_curves` read a trial's ``result.json``; :data:`CURVES` are the
  plotted metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.core import ALL_MODULES
from ray.tune.logger import LoggerCallback

from mara_agents.scalars import ScalarWriter
from mara_env.atomic import atomic_path

CURVES = (
    ("env_runners/mara/completion_rate", "completion rate (train episodes)"),
    ("env_runners/mara/shaped_return", "shaped return = completions"),
    ("env_runners/mara/reassignments", "re-assignments per episode"),
)

# The learner's statistics (of the one policy module) written as ``mara/learner/<name>``.
LEARNER_STATS = ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "vf_explained_var")
# ... and with a group-relative advantage (mara_agents.training.group): the fraction of steps
# without a group mate, and the spread of the episodes' returns, overall and within groups.
GROUP_STATS = ("group_fallback", "return_std", "return_std_in_group")


def tensorboard_scalars(result: dict[str, Any]) -> dict[str, float]:
    """The ``mara/`` TensorBoard scalars of one training result (tag: value)."""
    episodes = result.get("env_runners", {}).get("mara", {})
    scalars = {f"mara/{k}": v for k, v in {**episodes, **result.get("mara", {})}.items()}
    for module, stats in result.get("learners", {}).items():
        if module != ALL_MODULES:
            names = (*LEARNER_STATS, *GROUP_STATS)
            scalars.update({f"mara/learner/{k}": stats[k] for k in names if k in stats})
    return {tag: float(v) for tag, v in scalars.items() if np.isscalar(v)}


class MaraTensorBoard(LoggerCallback):
    """Write :func:`tensorboard_scalars` of each result into an event file of its trial's
    directory, at step ``mara/node_decisions``."""

    def __init__(self) -> None:
        self._writers: dict[Any, ScalarWriter] = {}

    def log_trial_start(self, trial: Any) -> None:
        if trial in self._writers:
            self._writers[trial].close()
        trial.init_local_path()
        self._writers[trial] = ScalarWriter(trial.local_path, filename_suffix=".mara")

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._writers:
            self.log_trial_start(trial)
        writer = self._writers[trial]
        writer.add(int(result["mara"]["node_decisions"]), tensorboard_scalars(result))
        writer.flush()  # an interrupted run keeps every finished iteration

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        if trial in self._writers:
            self._writers.pop(trial).close()


def _nested(d: dict[str, Any], path: str) -> float:
    """The number at ``path`` (``a/b/c``) of a result, nan where it is missing;
    ValueError naming the path where the result holds something else there."""
    for key in path.split("/"):
        if not isinstance(d, dict):
            raise ValueError(f"{path}: {d!r} where an object was expected")
        if key not in d:
            return float("nan")
        d = d[key]
    if not isinstance(d, (int, float)) or isinstance(d, bool):
        raise ValueError(f"{path} is {json.dumps(d)}; expected a number")
    return float(d)


# What the readers below take from each result (each checked as it is read)
READ = (
    "training_iteration",
    "time_total_s",
    "num_env_steps_sampled_lifetime",
    "mara/node_decisions",
    *(c for c, _ in CURVES),
)


def _result_rows(trial_dir: str | Path) -> list[dict[str, Any]]:
    """The results of a trial's ``result.json``, one JSON object a line, each number the
    readers take a number; ValueError naming the line and what is wrong."""
    rows = []
    for n, line in enumerate((Path(trial_dir) / "result.json").read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {n}: not JSON ({exc}; half-written?)") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {n}: {type(row).__name__} {line.strip()[:40]!r}, not an object")
        try:
            for path in READ:
                _nested(row, path)
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
        rows.append(row)
    if not rows:
        raise ValueError("no training iteration in it")
    return rows


def write_learning_curves_csv(trial_dir: str | Path, path: str | Path) -> Path:
    """One row per training iteration: ``training_iteration``, ``time_total_s``,
    ``num_env_steps_sampled_lifetime``, ``node_decisions`` and ``node_decisions_per_s``
    (:class:`~mara_agents.training.ppo.MaraMetrics`) and every simulator metric logged under
    ``env_runners/mara/`` (empty where no episode ended in that iteration).

    Tune's own ``progress.csv`` fixes its columns at the first iteration, before any episode
    has ended, so it never holds these metrics; this file does.
    """
    import pandas as pd

    rows = []
    for r in _result_rows(trial_dir):
        row = {k: r.get(k) for k in ("training_iteration", "time_total_s")}
        row["num_env_steps_sampled_lifetime"] = _nested(r, "num_env_steps_sampled_lifetime")
        row.update({k: float(v) for k, v in r.get("mara", {}).items() if np.isscalar(v)})
        mara = r.get("env_runners", {}).get("mara", {})
        row.update({k: float(v) for k, v in mara.items() if np.isscalar(v)})
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return Path(path)


def learning_curves(trial_dir: str | Path) -> dict[str, np.ndarray]:
    """``num_env_steps_sampled_lifetime`` and :data:`CURVES` per iteration of a trial.

    Read from ``result.json`` (Tune's CSV fixes its columns at the first iteration, before
    any episode has ended, so the episode metrics are missing there).
    """
    rows = _result_rows(trial_dir)
    keys = ("num_env_steps_sampled_lifetime", *(c for c, _ in CURVES))
    return {k: np.array([_nested(r, k) for r in rows]) for k in keys}


def plot_learning_curves(trial_dir: str | Path, png: str | Path) -> Path:
    """Plot :data:`CURVES` against sampled agent steps for one trial."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = learning_curves(trial_dir)
    x = data["num_env_steps_sampled_lifetime"] / 1e6
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.2))
    for ax, (col, title) in zip(axes, CURVES):
        ok = np.isfinite(data[col])  # iterations in which no episode ended
        ax.plot(x[ok], data[col][ok], marker=".")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("agent steps sampled (millions)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return Path(png)


def compare_runs(
    runs: list[tuple[str, Path]],
    png: str | Path,
    csv: str | Path | None = None,
    references: dict[str, float] | None = None,
    smooth: int = 5,
) -> Path:
    """Completion rate of the training episodes of several runs on one plot.

    ``runs``: ``(label, trial directory)`` pairs.  Left: against wall-clock minutes of
    training; right: against node decisions sampled.  Each curve is a centred running mean
    over ``smooth`` iterations (of RLlib's per-iteration mean; iterations in which no
    episode ended are skipped); ``references`` draws horizontal lines (e.g. heuristics'
    completion rate on the same split and load).  ``csv``: the unsmoothed points, long
    form (``run``, ``training_iteration``, ``time_total_s``, ``node_decisions``,
    ``completion_rate``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    frames = []
    for label, trial in runs:
        rows = _result_rows(trial)
        frames.append(
            pd.DataFrame(
                {
                    "run": label,
                    "training_iteration": [r.get("training_iteration") for r in rows],
                    "time_total_s": [r.get("time_total_s") for r in rows],
                    "node_decisions": [_nested(r, "mara/node_decisions") for r in rows],
                    "completion_rate": [_nested(r, CURVES[0][0]) for r in rows],
                }
            )
        )
    data = pd.concat(frames, ignore_index=True)
    if csv is not None:
        with atomic_path(csv) as tmp:
            data.to_csv(tmp, index=False)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, part in data.groupby("run", sort=False):
        part = part[np.isfinite(part["completion_rate"])]
        y = part["completion_rate"].rolling(smooth, center=True, min_periods=1).mean()
        axes[0].plot(part["time_total_s"] / 60, y, label=label)
        axes[1].plot(part["node_decisions"] / 1e6, y, label=label)
    for name, value in (references or {}).items():
        for ax in axes:
            ax.axhline(value, ls="--", lw=0.8, color="gray")
        axes[1].annotate(name, (axes[1].get_xlim()[1], value), fontsize=8, va="center")
    axes[0].set_xlabel("training time (minutes)")
    axes[1].set_xlabel("node decisions sampled (millions)")
    axes[0].set_ylabel(f"completion rate, train episodes ({smooth}-iteration mean)")
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return Path(png)
