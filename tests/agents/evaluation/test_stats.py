"""Statistics of results: paired differences over pooled tables, and the power of a test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mara_agents.evaluation.runner import evaluate
from mara_agents.evaluation.stats import (
    clustered_ci,
    episodes_for_power,
    family_paired_differences,
    mean_ci,
    paired_differences,
    power_above_zero,
)
from mara_env.config import ClusterConfig

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def config(small_config) -> ClusterConfig:
    return ClusterConfig.from_dict({**small_config, "num_nodes": 6, "num_slots": 16})


def test_power_matches_simulated_t_intervals() -> None:
    from scipy import stats

    rng = np.random.default_rng(0)
    margin, sd, n = 1.0, 3.7, 30
    d = margin + sd * rng.standard_normal((20_000, n))
    lower = d.mean(axis=1) - stats.t.ppf(0.975, n - 1) * d.std(axis=1, ddof=1) / np.sqrt(n)
    assert power_above_zero(margin, sd, n) == pytest.approx((lower > 0).mean(), abs=0.01)
    # a larger margin or more episodes give more power; no margin gives the test's 2.5 %
    assert power_above_zero(2.0, sd, n) > power_above_zero(margin, sd, n)
    assert power_above_zero(margin, sd, 100) > power_above_zero(margin, sd, n)
    assert power_above_zero(0.0, sd, n) == pytest.approx(0.025, abs=1e-9)


def test_episodes_for_power_is_the_fewest() -> None:
    n = episodes_for_power(1.0, 3.7)
    assert power_above_zero(1.0, 3.7, n) >= 0.8 > power_above_zero(1.0, 3.7, n - 1)
    assert episodes_for_power(50.0, 1.0) == 2
    assert episodes_for_power(0.0, 3.7) is None and episodes_for_power(-1.0, 3.7) is None
    assert episodes_for_power(1e-4, 3.7, limit=1000) is None
    with pytest.raises(ValueError, match="episodes=1"):
        power_above_zero(1.0, 3.7, 1)


def test_tables_of_two_runs_pair_by_episode_seed(config) -> None:
    """`--seeds 0,1` numbers base seed 1's episodes on from base seed 0's; `--seeds 1`
    numbers them from 0.  Pooled, the same episodes must still pair."""
    both = evaluate(["uniform"], [1.0], 3, [0, 1], config, workers=1, progress=False)
    one = evaluate(["edf"], [1.0], 3, [1], config, workers=1, progress=False)
    assert set(both[both.base_seed == 1].episode) != set(one.episode)  # numbered differently
    pooled = pd.concat([both, one], ignore_index=True)
    diff = paired_differences(pooled, "uniform").set_index("scheduler")
    u = both[both.base_seed == 1].set_index("seed").completion_rate
    e = one.set_index("seed").completion_rate
    assert diff.at["edf", "n"] == 3
    assert diff.at["edf", "diff"] == pytest.approx((e - u).mean())
    fam = family_paired_differences(pooled, "uniform")
    assert len(fam) and fam["diff"].notna().any()


def test_paired_power_script(config, tmp_path) -> None:
    df = evaluate(["uniform", "edf"], [2.0], 6, [0], config, workers=1, progress=False)
    df.to_csv(tmp_path / "r.csv", index=False)
    script = ROOT / "benchmarks" / "paired_power.py"
    args = ["--results", str(tmp_path / "r.csv"), "--reference", "edf", "--at-least", "1"]
    out = subprocess.run(
        [sys.executable, str(script), *args, "--scheduler", "uniform"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert "uniform - edf" in out and "episodes for 80 %" in out and "P(mean >= 1" in out
    bad = subprocess.run(
        [sys.executable, str(script), *args, "--scheduler", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode != 0 and "'nope': not in the results tables" in bad.stderr


def test_completion_plot_legend_covers_no_curve(tmp_path, monkeypatch) -> None:
    """The legend sits beside the axes of completion_vs_load.png (inside, it hid the
    curves at loads 1 to 1.4), however many schedulers it names."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from mara_agents.evaluation.report import plot_completion

    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    specs = ["lara", "mara=runs/a_long_policy_name.pt", *(f"s{i}" for i in range(6))]
    df = pd.DataFrame(
        [
            {"scheduler": s, "load": load, "completion_rate": 0.95 - 0.1 * load}
            for s in specs
            for load in (0.5, 1.0, 1.2, 1.4, 2.0)
            for _ in range(3)
        ]
    )
    plot_completion(df, tmp_path / "completion_vs_load.png")
    (fig,) = saved
    fig.canvas.draw()
    (ax,) = fig.axes
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes_box.x1  # right of the plotting area: over no curve
    assert legend.x1 <= fig.bbox.x1  # and inside the image


def test_headline_plots_tell_every_spec_apart_and_draw_the_paired_leads(
    tmp_path, monkeypatch
) -> None:
    """completion_vs_load.png draws one line per spec, each in its own colour, the shipped
    policy thickest and the references in greys; paired_differences.png draws mara minus
    each rival (not the clairvoyant ones) at every load, as paired_differences has it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import to_hex, to_rgb
    from matplotlib.figure import Figure

    from mara_agents.evaluation.report import PAIRED_PLOT, plot_completion, plot_paired_differences
    from mara_agents.reproduce import ALL_SPECS

    specs = (*ALL_SPECS, "bound")  # every table's, and the bound a user may add
    saved: list[Figure] = []
    savefig = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), savefig(fig, *a, **k))
    )
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        [
            {
                "scheduler": s,
                "load": load,
                "base_seed": 0,
                "seed": e,
                "completion_rate": rng.random(),
            }
            for load in (1.0, 2.0)
            for e in range(4)
            for s in specs
        ]
    )
    plot_completion(df, tmp_path / "completion_vs_load.png")
    assert plot_paired_differences(df, "mara", tmp_path / PAIRED_PLOT)
    assert not plot_paired_differences(df, "nope", tmp_path / "none.png")
    assert not plot_paired_differences(df[df["scheduler"] == "mara"], "mara", tmp_path / "1.png")
    for name in ("completion_vs_load.png", PAIRED_PLOT):
        assert (tmp_path / name).stat().st_size > 0
    lines, points = saved[0].axes[0].containers, saved[1].axes
    line = {c.get_label(): c.lines[0] for c in lines}
    assert sorted(line) == sorted(specs)
    assert len({to_hex(ln.get_color()) for ln in line.values()}) == len(specs)
    assert all(
        line["mara"].get_linewidth() > ln.get_linewidth() for s, ln in line.items() if s != "mara"
    )
    clairvoyant = ("bound", "oracle", "flow_share:predictor=exact", "hedge:predictor=exact")
    for ref in (*clairvoyant, "uniform"):
        r, g, b = to_rgb(line[ref].get_color())
        assert r == g == b and line[ref].get_linestyle() != "-"
    rivals = [s for s in specs if s not in ("mara", *clairvoyant)]
    lead = paired_differences(df, "mara").set_index(["scheduler", "load"])["diff"]
    ticks = [t.get_text() for t in points[0].get_yticklabels()]
    assert sorted(ticks) == sorted(rivals)
    for ax, load in zip(points, (1.0, 2.0)):
        drawn = {
            ticks[int(c.lines[0].get_ydata()[0])]: c.lines[0].get_xdata()[0] for c in ax.containers
        }
        assert drawn == pytest.approx({s: -100 * lead[(s, load)] for s in rivals})


def test_paired_leads_pair_episode_by_episode_and_refuse_unequal_lists():
    from mara_agents.evaluation.references import paired_leads

    episodes = {
        "mappo": [{"completion": c} for c in (0.5, 0.7, 0.9)],
        "edf": [{"completion": c} for c in (0.4, 0.7, 0.6)],
    }
    lead = paired_leads(episodes, "mappo", against=["edf"])
    assert lead["mappo_minus_edf"] == pytest.approx(0.4 / 3)
    # the t half-width of the differences (0.1, 0, 0.3), not of either list
    assert lead["mappo_minus_edf_ci95"] == pytest.approx(
        4.302653 * np.std([0.1, 0, 0.3], ddof=1) / 3**0.5
    )
    episodes["edf"].pop()
    with pytest.raises(ValueError, match="'mappo' has 3 episodes and 'edf' 2"):
        paired_leads(episodes, "mappo", against=["edf"])


def test_clustered_interval_treats_clusters_as_the_units() -> None:
    from scipy import stats

    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    # one value per cluster: the plain t-interval (G/(G-1) * sum of squares / G**2 is the
    # sample variance over G)
    m, h, g = clustered_ci(x, np.arange(12))
    assert g == 12 and (m, h) == pytest.approx(mean_ci(x))
    # 11 clusters of 9 near-copies each: the interval is that of 11 cluster means, far
    # wider than 99 independent episodes would give
    day = rng.normal(size=11)
    values = np.repeat(day, 9) + 0.01 * rng.normal(size=99)
    labels = np.repeat([f"2017-10-{d:02d}" for d in range(1, 12)], 9)
    m, h, g = clustered_ci(values, labels)
    means = values.reshape(11, 9).mean(axis=1)
    assert g == 11 and m == pytest.approx(values.mean())
    spread = stats.t.ppf(0.975, 10) * means.std(ddof=1) / np.sqrt(11)
    assert h == pytest.approx(spread, rel=0.01)
    assert h > 2.5 * mean_ci(values)[1]
    # nan values are left out; one cluster has no interval
    assert clustered_ci(np.array([1.0, np.nan, 2.0]), np.array(["a", "a", "a"]))[1:] == (
        pytest.approx(float("nan"), nan_ok=True),
        1,
    )


def test_paired_differences_on_replayed_days_add_a_day_clustered_interval() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for e in range(40):
        day = f"d{e % 4}"
        base = rng.uniform(0.6, 0.9)
        for spec, lift in (("a", 0.0), ("b", 0.02 * (e % 4) - 0.03)):
            rows.append(
                dict(
                    scheduler=spec,
                    load=1.0,
                    episode=e,
                    seed=e,
                    base_seed=0,
                    completion_rate=base + lift,
                    day=day,
                )
            )
    df = pd.DataFrame(rows)
    d = paired_differences(df, "a").iloc[0]
    assert d["days"] == 4 and d["ci95_day"] > 3 * d["ci95"]
    # synthetic episodes (no day): no such column
    assert "ci95_day" not in paired_differences(df.drop(columns="day"), "a").columns
