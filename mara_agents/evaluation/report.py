"""Reports of evaluation results: ``summary.md``, plots and TensorBoard scalars.

:func:`write_outputs` writes everything :func:`mara_agents.evaluation.runner.evaluate` leaves in its
output directory, from the results table (:mod:`mara_agents.evaluation.stats`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
from mara_env.atomic import atomic_path, atomic_write

REFERENCE = "lara"
POLICY = "mara"  # the shipped policy's spec: the reference whenever it is evaluated
PAIRED_PLOT = "paired_differences.png"  # the reference minus each rival, per load


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
        days = "ci95_day" in d.columns
        for spec in specs:
            if spec == reference:
                continue
            cells = [_fmt(d.at[(spec, x), "diff"], d.at[(spec, x), "ci95"]) for x in loads]
            if days:
                cells = [
                    f"{c} (days: ± {d.at[(spec, x), 'ci95_day']:.3f})" for c, x in zip(cells, loads)
                ]
            lines.append(f"| {spec} | " + " | ".join(cells) + " |")
        if days:
            n_days = ", ".join(
                f"{d.xs(x, level='load')['days'].min():.0f} at load {x:g}" for x in loads
            )
            lines += [
                "",
                f"The episodes replay a trace's days ({n_days}); episodes of the same day are "
                "not independent. The interval in brackets treats the days as the independent "
                "units (day-clustered): read it before calling a difference resolved.",
            ]
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
    ``completion_vs_load.png``, :data:`PAIRED_PLOT` (``reference`` minus each rival, per
    load; when it was evaluated), ``completion_by_family.png`` (with two or more trace
    families) and ``tb/`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.md", summary_markdown(df, reference).encode())
    subject = reference if reference in set(df["scheduler"]) else POLICY
    plot_completion(df, out / "completion_vs_load.png", subject)
    plot_paired_differences(df, reference, out / PAIRED_PLOT)
    plot_families(df, out / "completion_by_family.png")
    write_tensorboard(df, out / "tb")
    # last: a folder with results.csv holds a finished run's every file
    atomic_write(out / "results.csv", df.to_csv(index=False).encode())


def save_figure(fig: Any, path: str | os.PathLike, dpi: int) -> None:
    """Write a matplotlib figure to ``path`` atomically (no half-written image) and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    plt.close(fig)


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
    save_figure(fig, path, dpi=110)


# How the completion plot tells lines apart. The subject (the shipped policy, or whatever the
# paired differences are taken against) is thick and red; the references are black and
# greys, dashed: the clairvoyant ones (the bound, the oracle, any spec planning on exact
# work) and the floor (uniform share); every rival gets its own colour and a marker.
SUBJECT_COLOUR = "#d62728"
REFERENCE_STYLES = (
    ("black", "--", "s"),
    ("#404040", "-.", "D"),
    ("#6e6e6e", (0, (5, 1, 1, 1, 1, 1)), "v"),
    ("#9a9a9a", ":", "P"),
    ("#b8b8b8", (0, (1, 2)), "X"),
)
RIVAL_COLOURS = (
    *("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"),
    *("#393b79", "#637939", "#8c6d31", "#7b4173"),
    *("#9edae5", "#ffbb78", "#98df8a", "#c5b0d5"),
    *("#6b6ecf", "#e7ba52", "#843c39"),
)
RIVAL_MARKERS = ("o", "^", "s", "D", "v", "P", "X")


def is_clairvoyant(spec: str) -> bool:
    """Whether ``spec`` knows each task's true work: a ceiling, not a competitor."""
    return spec in GAP_CEILINGS or "predictor=exact" in spec


def _reference_rank(spec: str) -> int | None:
    """Where ``spec`` sits among the references, highest ceiling first (None: a rival)."""
    if spec in GAP_CEILINGS:
        return GAP_CEILINGS.index(spec)
    if is_clairvoyant(spec):
        return len(GAP_CEILINGS)
    return len(GAP_CEILINGS) + 1 if spec == GAP_FLOOR else None


def line_styles(specs: list[str], subject: str) -> dict[str, dict]:
    """Matplotlib style (colour, linestyle, marker, width, zorder) per spec: ``subject``
    stands out, the references are black to light grey from the bound down to uniform
    share, dashed, and the rivals thinner with a colour each (and a marker, so that past
    18 rivals the pairs still differ)."""
    styles: dict[str, dict] = {}
    refs = sorted(
        (s for s in specs if s != subject and _reference_rank(s) is not None),
        key=_reference_rank,
    )
    for i, spec in enumerate(refs):
        colour, ls, marker = REFERENCE_STYLES[i % len(REFERENCE_STYLES)]
        if i >= len(REFERENCE_STYLES):  # past five references: lighter greys
            colour = str(min(0.85, 0.5 + 0.07 * i))
        styles[spec] = dict(color=colour, ls=ls, marker=marker, lw=1.6, ms=5, zorder=3)
    rivals = [s for s in specs if s != subject and s not in styles]
    for i, spec in enumerate(rivals):
        colour = RIVAL_COLOURS[i % len(RIVAL_COLOURS)]
        marker = RIVAL_MARKERS[i % len(RIVAL_MARKERS)]
        styles[spec] = dict(color=colour, ls="-", marker=marker, lw=1.1, ms=4, zorder=4)
    if subject in specs:
        styles[subject] = dict(color=SUBJECT_COLOUR, ls="-", marker="o", lw=3.0, ms=7, zorder=5)
    return styles


def _legend_order(specs: list[str], subject: str) -> list[str]:
    """Subject first, then the rivals, then the references from the bound down."""
    refs = sorted((s for s in specs if _reference_rank(s) is not None), key=_reference_rank)
    rivals = [s for s in specs if s != subject and s not in refs]
    return [s for s in (subject,) if s in specs] + rivals + [s for s in refs if s != subject]


def plot_completion(df: pd.DataFrame, path: str | os.PathLike, subject: str = POLICY) -> None:
    """Completion rate vs load, one line per scheduler with 95% CI error bars; ``subject``
    (default the shipped policy) thick and red, the references dashed in black and greys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarise(df)
    specs = list(dict.fromkeys(s["scheduler"]))
    styles = line_styles(specs, subject)
    # tall enough for the legend beside it: a line of it per spec
    fig, ax = plt.subplots(figsize=(7.5, max(4.0, 0.22 * len(specs) + 0.6)))
    for spec in _legend_order(specs, subject):
        g = s[s["scheduler"] == spec]
        st = styles[spec]
        ax.errorbar(
            g["load"],
            g["mean"],
            yerr=g["ci95"].fillna(0),
            color=st["color"],
            linestyle=st["ls"],
            marker=st["marker"],
            linewidth=st["lw"],
            markersize=st["ms"],
            zorder=st["zorder"],
            capsize=3,
            label=spec,
        )
    ax.set_xlabel("load factor ρ")
    ax.set_ylabel("completion rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    # Beside the axes: inside, it covered the curves wherever they ran high (loads 1 to 1.4).
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def plot_paired_differences(df: pd.DataFrame, reference: str, path: str | os.PathLike) -> bool:
    """``reference`` minus each rival in completion rate (points), per load, on the same
    episodes, with its paired 95% t-interval (on replayed days, the day-clustered one:
    :func:`~mara_agents.evaluation.stats.clustered_ci`): one panel per load, rivals ranked by their
    mean over loads (clairvoyant specs left out: they are ceilings). False, and nothing
    written, when ``reference`` was not evaluated or has no rival."""
    specs = list(dict.fromkeys(df["scheduler"]))
    if reference not in specs or len(specs) < 2:
        return False
    d = paired_differences(df, reference)
    d = d[~d["scheduler"].map(is_clairvoyant)]
    if d.empty:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = line_styles(specs, reference)
    # the reference's lead is minus (rival - reference); in points
    days = "ci95_day" in d.columns
    d = d.assign(lead=-100 * d["diff"], half=100 * d["ci95_day" if days else "ci95"].fillna(0))
    order = d.groupby("scheduler", sort=False)["lead"].mean().sort_values().index.tolist()
    loads = sorted(d["load"].unique())
    height = 1.2 + 0.32 * len(order)
    fig, axes = plt.subplots(
        1,
        len(loads),
        figsize=(2.2 + 2.6 * len(loads), height),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    y = {spec: i for i, spec in enumerate(order)}
    for ax, load in zip(axes[0], loads):
        g = d[d["load"] == load]
        for _, r in g.iterrows():
            st = styles[r["scheduler"]]
            ax.errorbar(
                r["lead"],
                y[r["scheduler"]],
                xerr=r["half"],
                color=st["color"],
                marker=st["marker"],
                markersize=st["ms"] + 1,
                capsize=3,
                linestyle="none",
            )
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(f"load {load:g}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel("points", fontsize=8)
    axes[0, 0].set_yticks(range(len(order)), order, fontsize=8)
    axes[0, 0].set_ylim(-0.6, len(order) - 0.4)
    n = int(d["n"].min())
    interval = (
        f"95% paired interval clustered by day, {d['days'].min():.0f} days"
        if days
        else "95% paired t-interval"
    )
    fig.suptitle(
        f"{reference} − rival, completion rate (same {n} episodes; {interval}; "
        f"right of 0: {reference} ahead)",
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return True


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
    save_figure(fig, path, dpi=120)


def write_tensorboard(df: pd.DataFrame, log_dir: str | os.PathLike) -> None:
    """Scalars ``eval/<metric>/<scheduler>`` (mean per load, step = round(100 * load))."""
    writer = ScalarWriter(log_dir)
    metrics = ("completion_rate", *METRICS)
    means = df.groupby(["scheduler", "load"], sort=False)[list(metrics)].mean()
    for (spec, load), row in means.iterrows():
        tag_spec = spec.replace("=", "_").replace(":", "_")
        writer.add(int(round(100 * load)), {f"eval/{m}/{tag_spec}": row[m] for m in metrics})
    writer.close()
