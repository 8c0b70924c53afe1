"""benchmarks/calibration_drift.py plays each scenario (users' deadlines against another
cluster's history) and writes, per copy of the remaining-work model (its run's
recalibration reset per episode, held, or carried across days), coverage and error by
block of days and by phase; a first day is the same for the online and carried copies."""

from __future__ import annotations

import pandas as pd

from tests.conftest import run_script

SCRIPT = "benchmarks/calibration_drift.py"


def test_two_days_print_and_write_every_scenario_and_copy(tmp_path):
    csv = tmp_path / "drift.csv"
    argv = ["--episodes", "2", "--loads", "1.0", "--blocks", "2", "--quiet", "--csv", str(csv)]
    proc = run_script(SCRIPT, *argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("test split, 16 nodes, 2 episodes per load"), proc.stdout[:300]

    rows = pd.read_csv(csv, dtype={"days": str, "phase": str})
    assert list(rows.columns) == [
        "tasks", "history", "copy", "days", "phase", "coverage", "coverage50", "log_error",
        "n", "split",
    ]  # fmt: skip
    scenarios = set(zip(rows["tasks"], rows["history"]))
    assert ("padded", "unbiased") in scenarios and ("noisy", "unbiased") in scenarios
    assert ("padded", "padded") in scenarios and len(scenarios) == 8
    assert set(rows["copy"]) == {"online", "held", "carried"}
    assert set(rows["days"]) == {"0", "1", "all"} and set(rows["phase"]) == {"0", "1", "2", "all"}
    for column in ("coverage", "coverage50"):
        assert rows[column].between(0, 1).all()
    assert (rows["log_error"] >= 0).all() and (rows["n"] > 0).all()
    first = rows[(rows["days"] == "0") & (rows["phase"] == "all")].set_index(["tasks", "history"])
    online, carried = (first[first["copy"] == c].sort_index() for c in ("online", "carried"))
    # nothing is carried into a first day: the two copies read the same
    assert online[["coverage", "coverage50", "log_error"]].equals(
        carried[["coverage", "coverage50", "log_error"]]
    )

    assert "completion" not in proc.stdout  # only with --completion

    again = run_script(SCRIPT, *argv)
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr[-2000:]
    bad = run_script(SCRIPT, "--episodes", "2", "--blocks", "3")
    assert bad.returncode == 2 and "--blocks" in bad.stderr


def test_completion_pairs_hedge_on_the_carried_copy_with_the_online_one(tmp_path):
    gains = tmp_path / "gains.csv"
    argv = ["--episodes", "2", "--loads", "2.0", "--quiet", "--completion"]
    proc = run_script(SCRIPT, *argv, "--completion-csv", str(gains))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hedge's completion rate planning on the online and the carried copy" in proc.stdout
    table = pd.read_csv(gains)
    assert list(table.columns) == [
        "tasks", "history", "load", "online", "carried", "carried_minus_online", "ci95",
        "episodes", "split",
    ]  # fmt: skip
    assert len(table) == 8 and (table["episodes"] == 2).all()
    assert table["online"].between(0, 1).all() and table["carried"].between(0, 1).all()
    gap = 100 * (table["carried"] - table["online"])
    assert (gap - table["carried_minus_online"]).abs().max() < 0.011  # rates kept to 4 places
    lone = run_script(SCRIPT, "--episodes", "1", "--completion-csv", str(tmp_path / "x.csv"))
    assert lone.returncode == 2 and "--completion-csv needs --completion" in lone.stderr
