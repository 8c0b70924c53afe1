"""How many episodes does a comparison need?  Paired differences, their spread and power.

How to run:   python benchmarks/paired_power.py --results runs/a/results.csv [more.csv ...]
                  --scheduler mara --reference uniform [--episodes 30]

Reads one or more results tables of `mara evaluate` (pooled; episodes pair by load, base
seed and episode seed, so tables from runs with different ``--seeds`` pool correctly),
and prints per load, for SCHEDULER minus REFERENCE on their shared episodes: the mean
difference with its 95 % interval, the spread of one episode's difference, the chance
that a paired interval over ``--episodes`` new episodes would lie above zero if the
true margin were the measured mean, and the episodes that would give that chance 80 %.
With ``--at-least X``: also the chance that the mean over ``--episodes`` new episodes
reaches X points (a target on the mean, such as "8.5 points ahead of LARA").

Use it on the validation split to size a test before looking at it (docs/training.md,
"Where load 1 stands").  Results to expect: that section.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from mara_agents.evaluation.stats import EPISODE_KEY, episodes_for_power, mean_ci, power_above_zero


def pooled(paths: list[str]) -> pd.DataFrame:
    """The results tables, with each scheduler x episode kept once."""
    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    return df.drop_duplicates(["scheduler", *EPISODE_KEY])


def power_table(
    df: pd.DataFrame,
    scheduler: str,
    reference: str,
    episodes: int,
    at_least: float | None = None,
) -> pd.DataFrame:
    """One row per load: n, mean difference (points), 95 % half-width, sd, power, n for
    80 %; with ``at_least``, the chance that a new mean over ``episodes`` reaches it."""
    from scipy import stats

    for name in (scheduler, reference):
        if name not in set(df["scheduler"]):
            raise SystemExit(f"--scheduler/--reference {name!r}: not in the results tables")
    a = df[df["scheduler"] == scheduler].set_index(EPISODE_KEY)["completion_rate"]
    b = df[df["scheduler"] == reference].set_index(EPISODE_KEY)["completion_rate"]
    diff = ((a - b).dropna() * 100).rename("diff").reset_index()
    rows = []
    for load, g in diff.groupby("load"):
        d = g["diff"].to_numpy()
        mean, half = mean_ci(d)
        sd = float(d.std(ddof=1))
        need = episodes_for_power(mean, sd)
        reach = {}
        if at_least is not None:
            chance = stats.norm.sf((at_least - mean) / (sd / np.sqrt(episodes)))
            reach = {f"P(mean >= {at_least:g} | {episodes} episodes)": round(float(chance), 2)}
        rows.append(
            {
                "load": load,
                "episodes": len(d),
                "diff_points": round(mean, 2),
                "ci95": round(half, 2),
                "sd": round(sd, 2),
                f"P(interval > 0 | {episodes} episodes)": round(
                    power_above_zero(mean, sd, episodes), 2
                ),
                "episodes for 80 %": need if need is not None else np.nan,
                **reach,
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--results", nargs="+", required=True, help="results.csv of mara evaluate")
    p.add_argument("--scheduler", required=True, help="the spec compared, as in the tables")
    p.add_argument("--reference", required=True, help="the spec it is compared against")
    p.add_argument("--episodes", type=int, default=30, help="episodes per load of a new test")
    p.add_argument(
        "--at-least", type=float, default=None, help="a target on the mean difference (points)"
    )
    args = p.parse_args()
    table = power_table(
        pooled(args.results), args.scheduler, args.reference, args.episodes, args.at_least
    )
    print(f"{args.scheduler} - {args.reference}, completion-rate points, paired")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
