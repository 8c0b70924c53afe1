"""Fit the simulator's cluster to live runs: what ``mara calibrate`` writes.

From the ``slices.csv`` and ``journal.jsonl`` of one or more finished ``mara live`` runs
it fits three settings of :class:`mara_env.config.ClusterConfig` that the simulator
otherwise assumes:

* ``reassign_cost``, the share of a tick a joining node loses.  Live, a job whose workers
  change stalls while every worker restores and regroups (``setup_s``), so a slice of
  ``n`` workers of which ``j`` joined loses ``setup_s / tick`` of the job's tick; the
  simulator charges ``cost`` of a tick to each of the ``j`` joining nodes, so the slice
  estimates ``cost = n * setup_s / (tick * j)`` (exact for linear speed-up).  The median
  over slices with a joining node, clipped to [0, 1].
* ``alpha_range``, the speed-up prior: one exponent ``alpha`` of ``steps = rate * n**alpha``
  fitted by least squares on log steps of every steady slice (workers unchanged), with one
  ``rate`` per job and run, from the jobs that ran at two allocations or more.
* ``throughput_noise``: the coefficient of variation of a steady slice's steps around the
  mean of its job and allocation (pooled over groups of two slices or more).

Slices that stopped at their target are left out (they end early by design).  Nothing
here imports torch or ray.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SLICE_COLUMNS = ("job", "nodes", "joined", "status", "fresh", "slice_steps", "passed", "setup_s")
FITTED = ("reassign_cost", "alpha_range", "throughput_noise")


class CalibrationError(ValueError):
    """A live-run folder cannot be read or holds nothing to fit; one line names it."""


@dataclass(frozen=True)
class Calibration:
    """The fitted settings and what they rest on."""

    reassign_cost: float
    alpha: float | None  # None: no job ran steadily at two allocations
    throughput_noise: float
    runs: tuple[str, ...]
    steady: int  # steady slices (throughput, noise)
    joining: int  # slices with a joining node (reassign_cost)
    alpha_jobs: int  # jobs (per run) seen steady at two allocations or more
    shrinking: int  # changed slices with no joining node: a cost the simulator does not charge
    unmeasured: int = 0  # slices with a joining node but no setup_s (NaN): left out

    def settings(self) -> dict[str, object]:
        """The ClusterConfig keys it fits (``alpha_range`` only if it could be fitted)."""
        out: dict[str, object] = {"reassign_cost": round(self.reassign_cost, 4)}
        if self.alpha is not None:
            out["alpha_range"] = [round(self.alpha, 4), round(self.alpha, 4)]
        out["throughput_noise"] = round(self.throughput_noise, 4)
        return out

    def yaml(self) -> str:
        """The cluster file: a comment on its sources, then the settings."""
        import yaml

        alpha = "not fitted (no job ran steadily at two allocations): the default range"
        if self.alpha is not None:
            alpha = f"{self.alpha_jobs} jobs at two allocations or more"
        head = [
            "# Simulator settings fitted by `mara calibrate` from live runs:",
            *[f"#   {r}" for r in self.runs],
            f"# reassign_cost: median of {self.joining} slices with a joining node",
            f"# alpha_range: {alpha}",
            f"# throughput_noise: {self.steady} steady slices",
            "# Use: mara evaluate --cluster THIS.yaml, or these keys in an experiment's env:",
        ]
        return "\n".join(head) + "\n" + yaml.safe_dump(self.settings(), sort_keys=False)


def read_run(path: str | Path) -> tuple[pd.DataFrame, float]:
    """The slices of one finished live run and its tick length; one-line errors."""
    path = Path(path)
    if not path.exists():
        raise CalibrationError(f"{path}: no such folder")
    if not path.is_dir():
        raise CalibrationError(f"{path}: not a folder; expected the --out folder of `mara live`")
    journal = path / "journal.jsonl"
    slices_csv = path / "slices.csv"
    if not journal.is_file():
        raise CalibrationError(
            f"{path}: no journal.jsonl; expected the --out folder of `mara live`"
        )
    if not slices_csv.is_file():
        raise CalibrationError(
            f"{path}: no slices.csv: the run has not finished (`mara live --resume` ends it)"
        )
    try:
        with open(journal) as f:
            start = json.loads(f.readline())
        tick = float(start["tick_seconds"])
    except (ValueError, KeyError, TypeError, OSError):
        raise CalibrationError(
            f"{journal}: its first line is not the start record of a `mara live` run"
        ) from None
    if not (math.isfinite(tick) and tick > 0):
        raise CalibrationError(f"{journal}: tick_seconds={tick!r}; expected finite seconds > 0")
    try:
        slices = pd.read_csv(slices_csv)
    except (ValueError, OSError) as exc:
        why = (str(exc).splitlines() or [""])[0]
        raise CalibrationError(f"{slices_csv}: not a readable CSV ({why})") from None
    missing = [c for c in SLICE_COLUMNS if c not in slices.columns]
    if missing:
        raise CalibrationError(
            f"{slices_csv}: missing column(s) {missing} (written by an older `mara live`?)"
        )
    for column in ("nodes", "joined", "slice_steps", "setup_s"):
        if not pd.api.types.is_numeric_dtype(slices[column]):
            raise CalibrationError(f"{slices_csv}: column {column!r} is not numeric")
        if column != "setup_s":  # setup_s may be missing (nan): that slice is left out
            bad = ~np.isfinite(slices[column].to_numpy(np.float64))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise CalibrationError(
                    f"{slices_csv}: column {column!r} row {row}: {slices[column].iloc[row]:g}; "
                    "expected a finite number"
                )
    return slices, tick


def _bools(column: pd.Series) -> pd.Series:
    return column.astype(str).str.lower().isin(("true", "1"))


def calibrate(runs: list[str | Path]) -> Calibration:
    """Fit ``reassign_cost``, ``alpha`` and ``throughput_noise`` from live-run folders."""
    names = [str(Path(r)) for r in runs]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise CalibrationError(f"{name}: given twice; give each run once")
    costs, steady_parts = [], []
    shrinking = unmeasured = 0
    for i, run in enumerate(runs):
        slices, tick = read_run(run)
        ok = slices[(slices["status"] == "ok") & ~_bools(slices["passed"])]
        fresh = _bools(ok["fresh"])
        joining = ok[fresh & (ok["joined"] > 0) & (ok["nodes"] > 0)]
        measured = np.isfinite(joining["setup_s"].to_numpy(np.float64))
        unmeasured += int((~measured).sum())
        joining = joining[measured]
        share = joining["nodes"] * joining["setup_s"] / (tick * joining["joined"])
        costs += share.clip(0.0, 1.0).tolist()
        shrinking += int((fresh & (ok["joined"] == 0)).sum())
        steady = ok[~fresh & (ok["slice_steps"] > 0) & (ok["nodes"] > 0)]
        steady_parts.append(steady.assign(group=steady["job"].astype(str) + f"@{i}"))
    steady = pd.concat(steady_parts, ignore_index=True)
    if steady.empty:
        raise CalibrationError(
            f"{', '.join(names)}: no steady slices (workers unchanged, at least one step): "
            "nothing to fit the throughput from; run longer or with more ticks"
        )
    if not costs:
        why = f" and a measured setup_s ({unmeasured} have none)" if unmeasured else ""
        raise CalibrationError(
            f"{', '.join(names)}: no slice with a joining node{why}: nothing to fit "
            "reassign_cost from"
        )
    alpha, alpha_jobs = _alpha(steady)
    return Calibration(
        reassign_cost=float(np.median(costs)),
        alpha=alpha,
        throughput_noise=_noise(steady),
        runs=tuple(names),
        steady=len(steady),
        joining=len(costs),
        alpha_jobs=alpha_jobs,
        shrinking=shrinking,
        unmeasured=unmeasured,
    )


def _alpha(steady: pd.DataFrame) -> tuple[float | None, int]:
    """Least-squares ``alpha`` of log steps on log nodes, one intercept per job and run."""
    x = np.log(steady["nodes"].to_numpy(float))
    y = np.log(steady["slice_steps"].to_numpy(float))
    groups = steady["group"].to_numpy()
    xs, ys, used = [], [], 0
    for g in np.unique(groups):
        mine = groups == g
        if len(np.unique(x[mine])) < 2:
            continue  # one allocation says nothing about the speed-up
        used += 1
        xs.append(x[mine] - x[mine].mean())
        ys.append(y[mine] - y[mine].mean())
    if not used:
        return None, 0
    xc, yc = np.concatenate(xs), np.concatenate(ys)
    return float(np.clip((xc @ yc) / (xc @ xc), 0.0, 1.0)), used


def _noise(steady: pd.DataFrame) -> float:
    """Pooled coefficient of variation of steps within each job, run and allocation."""
    grouped = steady.groupby(["group", "nodes"])["slice_steps"]
    ratio = steady["slice_steps"] / grouped.transform("mean")
    sizes = grouped.transform("size")
    dof = float(grouped.size().clip(lower=1).sub(1).sum())
    if dof <= 0:
        return 0.0
    return float(np.sqrt(((ratio[sizes > 1] - 1.0) ** 2).sum() / dof))
