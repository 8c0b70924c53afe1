"""benchmarks/prediction_sources.py prints, per trace family and for all together, each
source's share predicted, median |log error|, 10-90 % and 25-75 % coverage (each with its
95 % interval clustered by trace), CRPS, n and traces at 0, 1, 3 and 10 reports, on the
test split by default, then the calibrated model's count of cells within the bands, and
writes the same rows as a CSV it will not overwrite without --force."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from tests.conftest import run_script

SCRIPT = "benchmarks/prediction_sources.py"


def test_one_episode_prints_and_writes_the_rows_per_family(tmp_path):
    csv = tmp_path / "sources.csv"
    proc = run_script(SCRIPT, "--episodes", "1", "--loads", "1.0", "--csv", str(csv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("test split, padded deadlines, 1 episodes"), proc.stdout[:300]
    header = (
        "source        reports predicted |log err|     in 10-90%     in 25-75%   CRPS      n traces"
    )
    assert header in proc.stdout

    rows = pd.read_csv(csv)
    assert list(rows.columns) == [
        "family", "source", "reports", "predicted", "log_error", "coverage", "coverage_ci",
        "coverage50", "coverage50_ci", "crps", "n", "traces", "split", "deadline_model",
    ]  # fmt: skip
    assert set(rows["split"]) == {"test"} and set(rows["deadline_model"]) == {"padded"}
    assert "all" in set(rows["family"]) and len(set(rows["family"])) > 1
    # fused: what hedge reads by default, beside every other source it may read
    assert set(rows["source"]) == {"flow", "deadline", "fused", "task-no-flow", "task"}
    assert set(rows["reports"]) <= {0, 1, 3, 10} and 0 in set(rows["reports"])
    assert rows["predicted"].between(0, 1).all()
    assert rows["coverage"].isna().eq(rows["predicted"] == 0).all()  # none predicted: "-"
    for column in ("coverage", "coverage50"):
        assert rows[column].dropna().between(0, 1).all()
    assert (rows["crps"].dropna() >= 0).all()
    assert (rows["n"] > 0).all()
    assert (rows["traces"] >= 1).all() and (rows["traces"] <= rows["n"]).all()
    # an interval wherever a coverage was measured on two traces or more
    measured = rows["coverage"].notna() & (rows["traces"] >= 2)
    for column in ("coverage_ci", "coverage50_ci"):
        assert (rows.loc[measured, column] >= 0).all()
    assert "(family, report count) cells have both coverages within 0.75-0.85" in proc.stdout
    arrival = rows[(rows["family"] == "all") & (rows["reports"] == 0)].set_index("source")
    assert arrival.loc["flow", "predicted"] == 0  # the flow model needs reports
    assert arrival.loc["deadline", "predicted"] == 1  # the prior speaks from arrival
    assert arrival.loc["task", "predicted"] == 1  # and so does the task model
    for family, part in rows.groupby("family"):
        assert f"\n{family}\n" in proc.stdout
        assert part.groupby("reports")["n"].nunique().eq(1).all()  # each source, same tasks

    again = run_script(SCRIPT, "--episodes", "1", "--loads", "1.0", "--csv", str(csv))
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr[-2000:]


def _script():
    path = Path(__file__).resolve().parents[3] / SCRIPT
    spec = importlib.util.spec_from_file_location("prediction_sources", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_band_cells_count_the_cells_in_band_and_name_those_beyond_their_interval():
    script = _script()
    cell = dict(source="task", predicted=1.0, log_error=0.3, crps=0.3, n=200)
    table = pd.DataFrame(
        [
            # within both bands
            dict(cell, family="lm", reports=0, coverage=0.80, coverage_ci=0.03,
                 coverage50=0.50, coverage50_ci=0.04, traces=40),
            # 10-90 % below its band, its interval too: named
            dict(cell, family="rl", reports=1, coverage=0.70, coverage_ci=0.03,
                 coverage50=0.50, coverage50_ci=0.04, traces=40),
            # 25-75 % above its band, but its interval reaches it: not named
            dict(cell, family="rl", reports=3, coverage=0.80, coverage_ci=0.03,
                 coverage50=0.58, coverage50_ci=0.05, traces=40),
            # far outside, on too few traces to judge
            dict(cell, family="tabular", reports=10, coverage=1.00, coverage_ci=0.00,
                 coverage50=1.00, coverage50_ci=0.00, traces=3),
            # the pooled family and the other sources are not counted
            dict(cell, family="all", reports=0, coverage=0.50, coverage_ci=0.01,
                 coverage50=0.20, coverage50_ci=0.01, traces=90),
            dict(cell, source="fused", family="lm", reports=0, coverage=0.50,
                 coverage_ci=0.01, coverage50=0.20, coverage50_ci=0.01, traces=40),
        ]
    )  # fmt: skip
    cells, inside, outside = script.band_cells(table)
    assert (cells, inside) == (4, 1)
    assert outside == ["rl at 1 reports: 0.70 ± 0.03 outside 0.75-0.85 (10-90 %)"]
