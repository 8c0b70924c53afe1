"""`mara calibrate`: the simulator's cluster fitted from live runs, and the file it writes
used by `mara simulate` and `mara evaluate`.  Live runs are written by hand here (no Ray)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mara_agents.cli import main
from mara_agents.live.calibrate import CalibrationError, calibrate

TICK = 2.0


def _run(folder: Path, alpha: float = 0.5, cv: float = 0.0, setup_s: float = 0.2) -> Path:
    """A finished live run: two jobs, steady slices at 1 and 2 nodes (steps = rate *
    n**alpha, times 1 -/+ cv in turn), and slices whose workers joined."""
    rows = []
    for job, rate in (("a", 40.0), ("b", 10.0)):
        for i, nodes in enumerate([1, 1, 2, 2, 1, 1, 2, 2]):
            steps = rate * nodes**alpha * (1 + cv * (-1) ** i)
            rows.append({"job": job, "nodes": nodes, "joined": 0, "fresh": False, "steps": steps})
        rows.append({"job": job, "nodes": 2, "joined": 2, "fresh": True, "steps": 5})
        rows.append({"job": job, "nodes": 2, "joined": 1, "fresh": True, "steps": 5})
    slices = pd.DataFrame(rows).rename(columns={"steps": "slice_steps"})
    slices["status"], slices["passed"] = "ok", False
    slices["setup_s"] = np.where(slices["fresh"], setup_s, 0.0)
    slices.loc[len(slices)] = {**slices.iloc[-1].to_dict(), "passed": True, "setup_s": 9.0}
    folder.mkdir(parents=True)
    slices.to_csv(folder / "slices.csv", index=False)
    start = {"kind": "start", "tick_seconds": TICK, "probes": []}
    (folder / "journal.jsonl").write_text(json.dumps(start) + "\n")
    return folder


def test_the_fit_recovers_the_cost_the_speed_up_and_the_noise(tmp_path):
    fit = calibrate([_run(tmp_path / "r1", alpha=0.5, cv=0.1), _run(tmp_path / "r2", alpha=0.5)])
    assert fit.alpha == pytest.approx(0.5, abs=1e-9)
    # joined 2 of 2: 0.2 s of a 2 s tick; joined 1 of 2: twice that per joining node
    assert fit.reassign_cost == pytest.approx(np.median([0.1, 0.2, 0.1, 0.2] * 2))
    # within each (job, run, nodes) group the steps are mean * (1 +/- 0.1) in r1, exact in r2
    assert 0.05 < fit.throughput_noise < 0.1
    assert fit.steady == 32 and fit.joining == 8 and fit.alpha_jobs == 4


def test_mara_calibrate_writes_a_file_that_evaluate_and_simulate_use(tmp_path, capsys):
    runs = [str(_run(tmp_path / "r1", cv=0.2, setup_s=2.0))]
    cluster = tmp_path / "cluster.yaml"
    assert main(["calibrate", *runs, "--out", str(cluster)]) == 0
    assert "wrote" in capsys.readouterr().out
    fitted = yaml.safe_load(cluster.read_text())
    assert set(fitted) == {"reassign_cost", "alpha_range", "throughput_noise"}
    assert main(["calibrate", *runs, "--out", str(cluster)]) == 2  # exists: --force
    assert "--force" in capsys.readouterr().err
    small = ["--split", "val", "--horizon", "15", "--nodes", "6"]
    assert main(["simulate", "--scheduler", "uniform", "--episodes", "1", *small]) == 0
    plain = capsys.readouterr().out
    assert main(["simulate", "--scheduler", "uniform", "--episodes", "1", *small,
                 "--cluster", str(cluster)]) == 0  # fmt: skip
    assert capsys.readouterr().out != plain  # a joining node now loses its whole tick
    out = tmp_path / "eval"
    args = ["evaluate", "--schedulers", "uniform,edf", "--loads", "1", "--episodes", "1"]
    args += [*small, "--workers", "1", "--no-progress", "--cluster", str(cluster)]
    assert main([*args, "--out", str(out)]) == 0
    assert len(pd.read_csv(out / "results.csv")) == 2


def _break(tmp_path: Path, how: str) -> Path:
    run = _run(tmp_path / "run")
    if how == "missing":
        return tmp_path / "nope"
    if how == "file":
        return run / "slices.csv"
    if how == "unfinished":
        (run / "slices.csv").unlink()
    elif how == "no journal":
        (run / "journal.jsonl").unlink()
    elif how == "bad journal":
        (run / "journal.jsonl").write_text("garbage\n")
    elif how == "old columns":
        pd.read_csv(run / "slices.csv").drop(columns=["joined"]).to_csv(run / "slices.csv")
    elif how.startswith("tick "):  # a start record whose tick_seconds is this JSON
        journal = (run / "journal.jsonl").read_text().splitlines()
        start = journal[0].replace(f'"tick_seconds": {TICK}', f'"tick_seconds": {how[5:]}')
        (run / "journal.jsonl").write_text("\n".join([start, *journal[1:]]) + "\n")
    elif how.startswith("inf "):  # a column of slices.csv holding inf
        slices = pd.read_csv(run / "slices.csv")
        slices[how[4:]] = slices[how[4:]].astype(float)
        slices.loc[0, how[4:]] = np.inf
        slices.to_csv(run / "slices.csv", index=False)
    elif how == "no steady":
        slices = pd.read_csv(run / "slices.csv")
        slices[slices["fresh"]].to_csv(run / "slices.csv", index=False)
    return run


@pytest.mark.parametrize(
    "how, message",
    [
        ("missing", "nope: no such folder"),
        ("file", "slices.csv: not a folder"),
        ("unfinished", "no slices.csv: the run has not finished"),
        ("no journal", "no journal.jsonl"),
        ("bad journal", "not the start record"),
        ("old columns", r"missing column\(s\) \['joined'\]"),
        ("no steady", "no steady slices"),
        ("tick Infinity", r"tick_seconds=inf; expected finite seconds > 0"),
        ("tick -Infinity", r"tick_seconds=-inf; expected finite seconds > 0"),
        ("tick NaN", r"tick_seconds=nan; expected finite seconds > 0"),
        ("tick 0", r"tick_seconds=0.0; expected finite seconds > 0"),
        ("inf nodes", r"column 'nodes' row 0: inf; expected a finite number"),
        ("inf slice_steps", r"column 'slice_steps' row 0: inf; expected a finite number"),
    ],
)
def test_a_bad_live_run_folder_gets_one_line(tmp_path, capsys, how, message):
    run = _break(tmp_path, how)
    with pytest.raises(CalibrationError, match=message):
        calibrate([run])
    assert main(["calibrate", str(run), "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("num_nodes: 4", "'num_nodes' is set by --nodes"),
        ("reassign_cost: 3", "reassign_cost=3"),
        ("colour: red", r"unknown key\(s\) \['colour'\]"),
        ("- 1", "expected a mapping"),
    ],
)
def test_a_bad_cluster_file_gets_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    assert main(["simulate", "--cluster", str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cluster.yaml" in err
    assert re.search(message, err)


def test_slices_without_setup_s_are_left_out_and_never_written_as_nan(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["calibrate", str(_run(tmp_path / "r", setup_s=np.nan)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "a measured setup_s" in err
    assert not out.exists()
    run = _run(tmp_path / "r2")
    slices = pd.read_csv(run / "slices.csv")
    slices.loc[slices.index[slices["fresh"]][0], "setup_s"] = np.nan
    slices.to_csv(run / "slices.csv", index=False)
    assert main(["calibrate", str(run), "--out", str(out)]) == 0
    assert "1 slices with a joining node had no setup_s" in capsys.readouterr().out
    assert "nan" not in out.read_text().lower()
