"""``mara curves``: several runs' learning curves on one figure, and its bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mara_agents.cli import main


def fake_trial(root: Path, name: str, rates: list[float | None]) -> Path:
    """A trial directory whose result.json holds one row per iteration (None: no episode
    ended in that iteration)."""
    trial = root / name / "PPO_0"
    trial.mkdir(parents=True)
    rows = []
    for i, rate in enumerate(rates, 1):
        mara = {} if rate is None else {"completion_rate": rate}
        rows.append(
            {
                "training_iteration": i,
                "time_total_s": 30.0 * i,
                "mara": {"node_decisions": 1000.0 * i},
                "env_runners": {"mara": mara},
            }
        )
    (trial / "result.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return trial


def test_curves_of_two_runs_go_to_one_figure_and_a_csv(tmp_path: Path) -> None:
    a = fake_trial(tmp_path, "mara_scratch", [0.5, None, 0.6, 0.7])
    fake_trial(tmp_path, "mara_no_shaping", [0.4, 0.45, 0.5])
    out = tmp_path / "curves.png"
    argv = ["curves", f"mara={a}", str(tmp_path / "mara_no_shaping"), "--out", str(out)]
    assert main([*argv, "--reference", "uniform=0.65", "--smooth", "2"]) == 0
    assert out.stat().st_size > 10_000
    df = pd.read_csv(out.with_suffix(".csv"))
    assert list(df["run"].unique()) == ["mara", "mara_no_shaping"]  # label, or the run's name
    assert df.loc[df["run"] == "mara", "completion_rate"].isna().sum() == 1
    assert df["node_decisions"].max() == 4000.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reference", "uniform"], "expected NAME=VALUE"),
        (["--reference", "uniform=high"], "'high' is not a number"),
        (["--smooth", "0"], "expected an integer in [1, "),
    ],
)
def test_bad_curves_arguments_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str], message: str
) -> None:
    trial = fake_trial(tmp_path, "run", [0.5])
    assert main(["curves", str(trial), "--out", str(tmp_path / "c.png"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_a_directory_without_results_is_named(tmp_path: Path, capsys) -> None:
    assert main(["curves", f"x={tmp_path}", "--out", str(tmp_path / "c.png")]) == 2
    assert "no result.json" in capsys.readouterr().err


def test_an_earlier_figure_is_replaced_only_with_force(tmp_path: Path, capsys) -> None:
    trial = fake_trial(tmp_path, "run", [0.5, 0.6])
    out = tmp_path / "c.png"
    out.write_bytes(b"an earlier figure")
    assert main(["curves", str(trial), "--out", str(out)]) == 2
    assert f"--out {out}: exists; choose a new name, or --force" in capsys.readouterr().err
    assert out.read_bytes() == b"an earlier figure"
    csv = tmp_path / "kept.csv"
    csv.write_text("earlier\n")
    assert main(["curves", str(trial), "--out", str(tmp_path / "d.png"), "--csv", str(csv)]) == 2
    assert f"--csv {csv}: exists" in capsys.readouterr().err
    assert csv.read_text() == "earlier\n" and not (tmp_path / "d.png").exists()
    assert main(["curves", str(trial), "--out", str(out), "--force"]) == 0
    assert out.stat().st_size > 10_000 and out.with_suffix(".csv").is_file()
