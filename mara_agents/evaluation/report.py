"""Reports of evaluation results: ``summary.md``, plots and TensorBoard scalars.

:func:`write_outputs` writes everything :func:`mara_agents.evaluation.runner.evaluate` leaves in its
output directory, from the results table (:mod:`mara_agents.evaluation.stats`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from mara_agents.evaluation.stats import (
    METRICS,
    family_paired_differences,
    family_rates,
    gap_shares,
    paired_differences,
    summarise,
)
from mara_agents.scalars import ScalarWriter

REFERENCE = "lara"
POLICY = "mara"  # the shipped policy's spec: the reference whenever it is evaluated


def default_reference(specs: list[str]) -> str:
    """What paired differences are taken against: the shipped policy when it is among
    ``specs``, else LARA when it is, else the first."""
    for name in (POLICY, REFERENCE):
        if name in specs:
            return name
    return specs[0]


# The gap table: how much of the room between uniform share (no knowledge of the work) and
# each ceiling a scheduler closes: the clairvoyant bound and LARA's planner on exact work.
GAP_FLOOR = "uniform"
GAP_CEILINGS = ("bound", "oracle")


def family_markdown(df: pd.DataFrame, reference: str = REFERENCE) -> list[str]:
    """Lines of the per-family table of ``summary.md`` (none when there is one family),
    with the paired differences against ``reference`` when it was evaluated."""
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
    if reference not in specs or len(specs) < 2:
        return lines
    lines += [
        "",
        f"### Paired difference by trace family vs {reference} (same tasks; 95% t-interval)",
        "",
        "| scheduler | load | " + " | ".join(families) + " |",
        "|---|---|" + "---|" * len(families),
    ]
    diffs = family_paired_differences(df, reference)
    for (spec, load), g in diffs.groupby(["scheduler", "load"], sort=False):
        cells = [_fmt(m, h) for m, h in zip(g["diff"], g["ci95"])]
        lines.append(f"| {spec} | {load:g} | " + " | ".join(cells) + " |")
    return lines


def gap_markdown(df: pd.DataFrame) -> list[str]:
    """Lines of the table of how much of the room above uniform share each scheduler
    closes, towards the clairvoyant bound and towards the oracle (none unless uniform and
    one of them were evaluated)."""
    shares = gap_shares(df, GAP_FLOOR, GAP_CEILINGS)
    if shares.empty:
        return []
    ceilings = [c for c in GAP_CEILINGS if c in shares.columns]
    loads = sorted(shares["load"].unique())
    head = [f"{c} @ {x:g}" for x in loads for c in ceilings]
    lines = [
        "",
        f"## Share of the room above {GAP_FLOOR} closed, towards {' and '.join(ceilings)}",
        "",
        f"(S − {GAP_FLOOR}) / (ceiling − {GAP_FLOOR}) on mean completion rates: 1 is level "
        "with the ceiling, 0 no better than uniform share, below 0 worse.",
        "",
        "| scheduler | " + " | ".join(head) + " |",
        "|---|" + "---|" * len(head),
    ]
    table = shares.set_index(["scheduler", "load"])
    for spec in dict.fromkeys(shares["scheduler"]):
        if spec in (GAP_FLOOR, *ceilings):
            continue
        cells = [f"{table.at[(spec, x), c]:.2f}" for x in loads for c in ceilings]
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return lines


def _fmt(m: float, h: float) -> str:
    return f"{m:.3f} ± {h:.3f}" if np.isfinite(h) else f"{m:.3f}"


def summary_markdown(df: pd.DataFrame, reference: str = REFERENCE) -> str:
    """The ``summary.md`` text: completion rate and other metrics, and paired differences
    against ``reference`` (the first scheduler when ``reference`` was not evaluated)."""
    specs = list(dict.fromkeys(df["scheduler"]))
    loads = sorted(df["load"].unique())
    reference = reference if reference in specs else specs[0]
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
    lines += gap_markdown(df)
    lines += family_markdown(df, reference)
    lines += ["", "## Other metrics (mean per episode)", ""]
    cols = ("utilisation", "wasted_node_ticks", "reassignments", "expired", "tasks")
    lines += ["| scheduler | load | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    means = df.groupby(["scheduler", "load"], sort=False)[list(cols)].mean()
    for (spec, load), r in means.iterrows():
        vals = [f"{r['utilisation']:.3f}", *(f"{r[c]:.1f}" for c in cols[1:])]
        lines.append(f"| {spec} | {load:g} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(df: pd.DataFrame, out_dir: str | os.PathLike, reference: str = REFERENCE) -> None:
    """``results.csv``, ``summary.md`` (paired differences against ``reference``),
    ``completion_vs_load.png``, ``completion_by_family.png`` (with two or more trace
    families) and ``tb/`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "results.csv", index=False)
    (out / "summary.md").write_text(summary_markdown(df, reference))
    plot_completion(df, out / "completion_vs_load.png")
    plot_families(df, out / "completion_by_family.png")
    write_tensorboard(df, out / "tb")


def plot_allocation(panels: list[tuple[str, np.ndarray]], path: str | os.PathLike) -> None:
    """A Gantt chart per panel: the ticks x nodes allocation (task indices, -1 idle) as
    nodes x ticks, one colour per task, white for idle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.2 * len(panels)), squeeze=False)
    cmap = matplotlib.colormaps["tab20"]
    for ax, (title, allocation) in zip(axes[:, 0], panels):
        alloc = np.asarray(allocation).T.astype(float)  # nodes x ticks
        colours = np.where(alloc[..., None] >= 0, cmap(np.mod(alloc, 20).astype(int)), 1.0)
        ax.imshow(colours, aspect="auto", interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("node")
    axes[-1, 0].set_xlabel("tick")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_completion(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Completion rate vs load, one line per scheduler with 95% CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarise(df)
    fig, ax = plt.subplots(figsize=(7.5, 4))
    # tab10's colours repeat after ten lines: past ten, the marker and dash tell them apart
    styles = [("o", "-"), ("s", "--"), ("^", ":")]
    for i, (spec, g) in enumerate(s.groupby("scheduler", sort=False)):
        yerr = g["ci95"].fillna(0)
        marker, dash = styles[(i // 10) % len(styles)]
        ax.errorbar(
            g["load"], g["mean"], yerr=yerr, marker=marker, linestyle=dash, capsize=3, label=spec
        )
    ax.set_xlabel("load factor ρ")
    ax.set_ylabel("completion rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    # Beside the axes: inside, it covered the curves wherever they ran high (loads 1 to 1.4).
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
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
    """Scalars ``eval/<metric>/<scheduler>`` (mean per load, step = round(100 * load))."""
    writer = ScalarWriter(log_dir)
    metrics = ("completion_rate", *METRICS)
    means = df.groupby(["scheduler", "load"], sort=False)[list(metrics)].mean()
    for (spec, load), row in means.iterrows():
        tag_spec = spec.replace("=", "_").replace(":", "_")
        writer.add(int(round(100 * load)), {f"eval/{m}/{tag_spec}": row[m] for m in metrics})
    writer.close()
