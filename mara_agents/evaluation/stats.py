"""Statistics of evaluation results: the results table, t-intervals and paired differences.

The results table has one row per scheduler x load x episode with the columns
:data:`COLUMNS`, then, per trace family ``F`` of the library, ``tasks_F`` and
``completed_F``.  Intervals are two-sided 95% t-intervals over episodes; differences are
paired on the episodes every scheduler shares (same seeds, same tasks).

Episodes that replay a job trace's days carry the date in a :data:`DAY` column.  A trace
split holds few days (Philly's test split: 11), so several episodes replay each day, and
they are not independent draws: a scheduler that suits one day wins on all its episodes.
Their paired differences therefore also get a *day-clustered* interval
(:func:`clustered_ci`), which treats the days, not the episodes, as the independent units
and is the one to read before calling a difference on replayed days resolved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

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
# and, for an episode that replays a trace's day, that day's date
DAY = "day"
# An episode is its load, base seed and own seed: the same for every scheduler, and the
# same in two results tables whatever other base seeds each ran (the ``episode`` column
# counts on across base seeds, so it differs between ``--seeds 0,1`` and ``--seeds 1``).
EPISODE_KEY = ["load", "base_seed", "seed"]


def mean_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its two-sided t confidence interval (nan for n < 2)."""
    from scipy import stats

    x = np.asarray(values, np.float64)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return (float(x.mean()) if len(x) else float("nan")), float("nan")
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def clustered_ci(
    values: np.ndarray, clusters: np.ndarray, level: float = 0.95
) -> tuple[float, float, int]:
    """Mean of ``values``, the half-width of its two-sided t-interval with the ``clusters``
    (one label per value) as the independent units, and their number.

    The cluster-robust (CR1) variance of a mean, ``G/(G-1) * sum_g S_g**2 / n**2`` with
    ``S_g`` the sum of cluster ``g``'s deviations from the mean, and ``G - 1`` degrees of
    freedom; with one value per cluster it is :func:`mean_ci`'s interval.  The half-width
    is nan with fewer than two clusters.
    """
    from scipy import stats

    x = np.asarray(values, np.float64)
    labels = np.asarray(clusters)
    keep = ~np.isnan(x)
    x, labels = x[keep], labels[keep]
    if not len(x):
        return float("nan"), float("nan"), 0
    mean = float(x.mean())
    _, which = np.unique(labels, return_inverse=True)
    g = int(which.max()) + 1
    if g < 2:
        return mean, float("nan"), g
    sums = np.bincount(which, weights=x - mean)
    var = g / (g - 1) * float((sums**2).sum()) / len(x) ** 2
    return mean, float(stats.t.ppf(0.5 + level / 2, g - 1) * np.sqrt(var)), g


def has_days(df: pd.DataFrame) -> bool:
    """Whether every episode of ``df`` replays a trace's day (names it in :data:`DAY`)."""
    return DAY in df.columns and bool(df[DAY].notna().all())


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
    """Per scheduler x load: mean of (scheduler - reference) over shared episodes, 95% CI
    (``df`` may pool results tables of several runs: episodes pair by :data:`EPISODE_KEY`).
    When every episode replays a trace's day (:func:`has_days`), also ``ci95_day``, the
    day-clustered half-width (:func:`clustered_ci`), and ``days``, how many days."""
    ref = df[df["scheduler"] == reference].set_index(EPISODE_KEY)[metric]
    days = has_days(df)
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        if spec == reference:
            continue
        g = g.set_index(EPISODE_KEY)
        d = (g[metric] - ref).reindex(g.index)
        m, h = mean_ci(d.dropna().to_numpy())
        n = int(d.notna().sum())
        row = {"scheduler": spec, "load": load, "diff": m, "ci95": h, "n": n}
        if days:
            _, row["ci95_day"], row["days"] = clustered_ci(d.to_numpy(), g[DAY].to_numpy())
        rows.append(row)
    return pd.DataFrame(rows)


def gap_shares(df: pd.DataFrame, floor: str, ceilings: Sequence[str]) -> pd.DataFrame:
    """Per scheduler x load: the share of the room between ``floor`` and each of
    ``ceilings`` that the scheduler closes, ``(S - floor) / (ceiling - floor)`` on pooled
    means (1: level with the ceiling, 0: no better than the floor); a column per ceiling
    evaluated, none when ``floor`` was not."""
    means = df.groupby(["scheduler", "load"], sort=False)["completion_rate"].mean()
    specs = list(dict.fromkeys(df["scheduler"]))
    ceilings = [c for c in ceilings if c in specs]
    if floor not in specs or not ceilings:
        return pd.DataFrame()
    rows = []
    for (spec, load), mean in means.items():
        low = means[(floor, load)]
        row = {"scheduler": spec, "load": load}
        for c in ceilings:
            room = means[(c, load)] - low
            row[c] = (mean - low) / room if room > 0 else float("nan")
        rows.append(row)
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
    ref = df[df["scheduler"] == reference].set_index(EPISODE_KEY)
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        if spec == reference:
            continue
        g = g.set_index(EPISODE_KEY)
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


def power_above_zero(margin: float, sd: float, episodes: int, level: float = 0.95) -> float:
    """Chance that a paired t-interval over ``episodes`` episodes lies above zero, when the
    true mean difference is ``margin`` and one episode's difference has spread ``sd``
    (one-sided power of the two-sided interval's lower bound; noncentral t)."""
    from scipy import stats

    if episodes < 2 or sd <= 0:
        raise ValueError(f"power: episodes={episodes}, sd={sd}; expected >= 2 and > 0")
    df = episodes - 1
    crit = stats.t.ppf(0.5 + level / 2, df)
    return float(stats.nct.sf(crit, df, margin / (sd / np.sqrt(episodes))))


def episodes_for_power(
    margin: float, sd: float, power: float = 0.8, level: float = 0.95, limit: int = 100_000
) -> int | None:
    """Fewest episodes whose paired interval lies above zero with chance ``power``
    (:func:`power_above_zero`); None when ``margin <= 0`` or more than ``limit`` needed."""
    if margin <= 0:
        return None
    lo, hi = 2, 2
    while power_above_zero(margin, sd, hi, level) < power:
        if hi >= limit:
            return None
        lo, hi = hi, min(2 * hi, limit)
    while lo < hi:  # smallest n in (lo, hi] with enough power (power grows with n)
        mid = (lo + hi) // 2
        if power_above_zero(margin, sd, mid, level) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi
