"""Statistics of evaluation results: the results table, t-intervals and paired differences.

The results table has one row per scheduler x load x episode with the columns
:data:`COLUMNS`, then, per trace family ``F`` of the library, ``tasks_F`` and
``completed_F``.  Intervals are two-sided 95% t-intervals over episodes; differences are
paired on the episodes every scheduler shares (same seeds, same tasks).
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
    (``df`` may pool results tables of several runs: episodes pair by :data:`EPISODE_KEY`)."""
    ref = df[df["scheduler"] == reference].set_index(EPISODE_KEY)[metric]
    rows = []
    for (spec, load), g in df.groupby(["scheduler", "load"], sort=False):
        if spec == reference:
            continue
        d = g.set_index(EPISODE_KEY)[metric] - ref
        m, h = mean_ci(d.dropna().to_numpy())
        n = int(d.notna().sum())
        rows.append({"scheduler": spec, "load": load, "diff": m, "ci95": h, "n": n})
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
