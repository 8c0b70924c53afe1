"""benchmarks/prediction_sources.py prints, per trace family and for all together, each
source's share predicted, median |log error|, 10-90 % and 25-75 % coverage, CRPS and n
at 0, 1, 3 and 10 reports, on the test split by default, and writes the same rows as a
CSV it will not overwrite without --force."""

from __future__ import annotations

import pandas as pd

from tests.conftest import run_script

SCRIPT = "benchmarks/prediction_sources.py"


def test_one_episode_prints_and_writes_the_rows_per_family(tmp_path):
    csv = tmp_path / "sources.csv"
    proc = run_script(SCRIPT, "--episodes", "1", "--loads", "1.0", "--csv", str(csv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("test split, padded deadlines, 1 episodes"), proc.stdout[:300]
    header = "source        reports predicted |log err| in 10-90% in 25-75%   CRPS      n"
    assert header in proc.stdout

    rows = pd.read_csv(csv)
    assert list(rows.columns) == [
        "family", "source", "reports", "predicted", "log_error", "coverage", "coverage50",
        "crps", "n", "split", "deadline_model",
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
    arrival = rows[(rows["family"] == "all") & (rows["reports"] == 0)].set_index("source")
    assert arrival.loc["flow", "predicted"] == 0  # the flow model needs reports
    assert arrival.loc["deadline", "predicted"] == 1  # the prior speaks from arrival
    assert arrival.loc["task", "predicted"] == 1  # and so does the task model
    for family, part in rows.groupby("family"):
        assert f"\n{family}\n" in proc.stdout
        assert part.groupby("reports")["n"].nunique().eq(1).all()  # each source, same tasks

    again = run_script(SCRIPT, "--episodes", "1", "--loads", "1.0", "--csv", str(csv))
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr[-2000:]
