"""Held-out evaluation of remaining-work predictors on a trace library.

For every trace and observed-prefix fraction ``f`` the prefix is the first
``max(3, round(f * N))`` logged points; targets are the trace's smoothed loss at points
spread over the remaining part (:data:`TARGET_POSITIONS`), kept when the prefix has not
reached them yet.  The true remaining work is the first logged step whose *raw* loss is
``<= eps`` minus the current work: exactly when the simulator would complete the task.

Metrics per (family, prefix fraction, method), on remaining work ``R`` (predictions
clipped to ``[0.01, 24] x`` current work, the flow model's horizon, so "never" counts as
the horizon's end for every method):

* ``mae_log_ratio``: mean ``|log(median / R)|``;
* ``median_rel_error``: median ``|median - R| / R``;
* ``crps``: CRPS of the predicted distribution of ``log R`` (point methods: absolute error);
* ``coverage50``, ``coverage80``: fraction of ``R`` inside the 25–75 % and 10–90 %
  intervals (calibrated: ~0.5 and ~0.8; point methods: ~0).

:func:`summarise_families` gives the same metrics per (family, method) over every prefix
fraction, with ``mae_vs_wls``: the method's ``mae_log_ratio`` over WLS's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from flow_predictor.features import FUTURE_RATIOS
from flow_predictor.remaining import MIN_RATIO, MIN_REPORTS, RemainingWorkPredictor
from mara_env.atomic import atomic_path, atomic_write
from mara_env.traces import TraceError, TraceSet

PREFIX_FRACTIONS = (0.1, 0.2, 0.4, 0.6)
TARGET_POSITIONS = (0.1, 0.3, 0.5, 0.7, 0.9)
METRIC_COLUMNS = (
    "family",
    "prefix_fraction",
    "method",
    "mae_log_ratio",
    "median_rel_error",
    "crps",
    "coverage50",
    "coverage80",
    "n",
)
FAMILY_COLUMNS = (
    "family",
    "method",
    "mae_log_ratio",
    "mae_vs_wls",
    "median_rel_error",
    "crps",
    "coverage50",
    "coverage80",
    "n",
)


@dataclass(frozen=True)
class Instances:
    """Evaluation prefixes (one per trace and fraction) and targets (several per prefix)."""

    works: list[np.ndarray]
    losses: list[np.ndarray]
    family: np.ndarray  # per prefix
    fraction: np.ndarray  # per prefix
    prefix: np.ndarray  # per target: index of its prefix
    target: np.ndarray  # per target: eps
    true_remaining: np.ndarray  # per target


def make_instances(
    traces: TraceSet,
    fractions: tuple[float, ...] = PREFIX_FRACTIONS,
    positions: tuple[float, ...] = TARGET_POSITIONS,
) -> Instances:
    """All (prefix, target, true remaining work) triples of a trace set."""
    works, losses, family, fraction = [], [], [], []
    prefix, target, true = [], [], []
    for i in range(len(traces)):
        steps, loss = traces.trace(i)
        smooth = traces.smoothed(i)
        n_pts = len(steps)
        for f in fractions:
            n = max(MIN_REPORTS, int(round(f * n_pts)))
            if n >= n_pts - 1:
                continue
            seen = float(loss[:n].min())
            js = sorted({n + int(round(q * (n_pts - 1 - n))) for q in positions})
            eps = sorted({float(smooth[j]) for j in js if smooth[j] < seen}, reverse=True)
            if not eps:
                continue
            p = len(works)
            works.append(steps[:n])
            losses.append(loss[:n])
            family.append(traces.families[i])
            fraction.append(f)
            for e in eps:
                hit = n + int(np.flatnonzero(loss[n:] <= e)[0])
                prefix.append(p)
                target.append(e)
                true.append(steps[hit] - steps[n - 1])
    return Instances(
        works=works,
        losses=losses,
        family=np.asarray(family),
        fraction=np.asarray(fraction),
        prefix=np.asarray(prefix, np.int64),
        target=np.asarray(target),
        true_remaining=np.asarray(true),
    )


def crps_samples(samples: np.ndarray, y: np.ndarray) -> np.ndarray:
    """CRPS of each row's empirical distribution at ``y``: E|X - y| - E|X - X'| / 2."""
    x = np.sort(samples, axis=1)
    s = x.shape[1]
    term1 = np.abs(x - y[:, None]).mean(axis=1)
    # E|X - X'| for sorted samples: (2 / s^2) * sum_i (2i - s - 1) x_(i)
    weights = 2 * np.arange(1, s + 1) - s - 1
    term2 = 2.0 * (x * weights).sum(axis=1) / s**2
    return term1 - 0.5 * term2


def score(predictor: RemainingWorkPredictor, inst: Instances) -> pd.DataFrame:
    """Per-target errors of one predictor (one row per target)."""
    fitted = predictor.fit(inst.works, inst.losses)
    rw = fitted.remaining(inst.target, inst.prefix)
    current = fitted.current[inst.prefix][:, None]
    lo, hi = MIN_RATIO * current, FUTURE_RATIOS[-1] * current
    clipped = np.clip(np.nan_to_num(rw.samples, nan=np.inf), lo, hi)
    q10, q25, q50, q75, q90 = rw.quantiles([0.1, 0.25, 0.5, 0.75, 0.9]).T
    med = np.clip(np.nan_to_num(q50, nan=np.inf), lo[:, 0], hi[:, 0])
    true = inst.true_remaining
    return pd.DataFrame(
        {
            "family": inst.family[inst.prefix],
            "prefix_fraction": inst.fraction[inst.prefix],
            "method": predictor.name,
            "abs_log_ratio": np.abs(np.log(med / true)),
            "rel_error": np.abs(med - true) / true,
            "crps": crps_samples(np.log(clipped), np.log(true)),
            "covered50": (q25 <= true) & (true <= q75),
            "covered": (q10 <= true) & (true <= q90),
        }
    )


def _metrics(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The metrics of :data:`METRIC_COLUMNS` over each group of per-target ``rows``."""
    return (
        rows.groupby(by, sort=True)
        .agg(
            mae_log_ratio=("abs_log_ratio", "mean"),
            median_rel_error=("rel_error", "median"),
            crps=("crps", "mean"),
            coverage50=("covered50", "mean"),
            coverage80=("covered", "mean"),
            n=("covered", "size"),
        )
        .reset_index()
    )


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (family, prefix fraction, method) metrics with :data:`METRIC_COLUMNS`."""
    return _metrics(rows, ["family", "prefix_fraction", "method"])[list(METRIC_COLUMNS)]


def summarise_families(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (family, method) metrics over all prefix fractions, with :data:`FAMILY_COLUMNS`
    (``mae_vs_wls``: nan when WLS was not scored)."""
    out = _metrics(rows, ["family", "method"])
    wls = out[out["method"] == "wls"].set_index("family")["mae_log_ratio"]
    out["mae_vs_wls"] = out["mae_log_ratio"] / out["family"].map(wls)
    return out[list(FAMILY_COLUMNS)]


@dataclass(frozen=True)
class Evaluation:
    """Metrics tables of one evaluation."""

    metrics: pd.DataFrame  # per (family, prefix fraction, method): METRIC_COLUMNS
    families: pd.DataFrame  # per (family, method): FAMILY_COLUMNS


def evaluate_all(predictors: list[RemainingWorkPredictor], traces: TraceSet) -> Evaluation:
    """Both metrics tables of every predictor on the same instances."""
    inst = make_instances(traces)
    if not len(inst.target):
        raise TraceError(
            f"none of the {len(traces)} trace(s) falls below the lowest loss of its observed "
            "prefix, so there is no remaining work to predict (flat or too short curves?)"
        )
    rows = pd.concat([score(p, inst) for p in predictors], ignore_index=True)
    return Evaluation(summarise(rows), summarise_families(rows))


def evaluate(predictors: list[RemainingWorkPredictor], traces: TraceSet) -> pd.DataFrame:
    """Metrics table (per family, prefix fraction, method) of every predictor."""
    return evaluate_all(predictors, traces).metrics


def write_evaluation(ev: Evaluation, out: str | Path) -> None:
    """Write ``predictor_metrics.csv``, ``predictor_families.csv`` and ``predictor_error.png``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "predictor_metrics.csv", ev.metrics.to_csv(index=False).encode())
    atomic_write(out / "predictor_families.csv", ev.families.to_csv(index=False).encode())
    plot_errors(ev.metrics, out / "predictor_error.png")


def evaluate_to_dir(
    predictors: list[RemainingWorkPredictor], traces: TraceSet, out: str | Path
) -> pd.DataFrame:
    """:func:`evaluate_all`, written by :func:`write_evaluation`; returns the metrics table."""
    ev = evaluate_all(predictors, traces)
    write_evaluation(ev, out)
    return ev.metrics


def plot_errors(metrics: pd.DataFrame, path: str | Path) -> None:
    """``mae_log_ratio`` vs prefix fraction, one panel per family, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted(metrics["family"].unique())
    fig, axes = plt.subplots(1, len(families), figsize=(4 * len(families), 3.4), squeeze=False)
    for ax, fam in zip(axes[0], families):
        sub = metrics[metrics["family"] == fam]
        for method, m in sub.groupby("method"):
            ax.plot(m["prefix_fraction"], m["mae_log_ratio"], marker="o", label=method)
        ax.set_title(fam)
        ax.set_xlabel("observed prefix fraction")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MAE of log(predicted / true remaining work)")
    axes[0][-1].legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
