"""examples/torchrl_marl.py, run as a user runs it: every algorithm trains, evaluates and
writes its outputs; the command line names bad settings; the curve plot draws the runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torchrl", reason="torchrl is not installed (pip install -e '.[torchrl]')")
import pandas as pd  # noqa: E402

from tests.conftest import run_script  # noqa: E402

SCRIPT = "examples/torchrl_marl.py"
# A tiny cluster; the budget is spent after the first batches.  Base seed 2: the three
# evaluation episodes each hold a task at this horizon (rates are not nan).
TINY = (
    "--minutes 0.02 --eval-every 0.5 --nodes 4 --slots 3 --horizon 10 --frames-per-batch 64 "
    "--minibatch 32 --epochs 1 --updates 2 --hidden 16 --episodes 3 --curve-episodes 2 "
    "--eval-seed 2"
)


@pytest.mark.parametrize(
    "algorithm, opt_in",
    [
        ("mappo", ""),
        ("ippo", ""),
        ("vdn", ""),
        ("qmix", "--stay"),
        ("mappo", "--stay --interval 2"),
        ("mappo", "--stay --actor slots"),
        ("vdn", "--actor slots"),
    ],
)
def test_algorithm_trains_evaluates_and_writes_outputs(tmp_path, algorithm, opt_in):
    out = tmp_path / "run"
    proc = run_script(SCRIPT, *f"--algorithm {algorithm} {opt_in} {TINY} --out {out}".split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    for name in (algorithm, "random_actions", "random_policy", "edf", "uniform"):
        assert 0.0 <= result[name] <= 1.0, name
    for name in ("random", "edf", "uniform"):  # paired over the same 3 episodes
        assert math.isclose(result[f"{algorithm}_minus_{name}"], result[algorithm] - result[name])
    curve = pd.read_csv(out / "curve.csv")
    assert list(curve.columns) == [
        "wall_s",
        "frames",
        "ticks",
        "train_episodes",
        "train_completion",
        "val_completion",
    ]
    assert len(curve) >= 2 and curve["frames"].is_monotonic_increasing
    assert curve["frames"].iloc[-1] == result["frames"] and result["frames"] % 64 == 0
    ticks_per_frame = 2 if "--interval 2" in opt_in else 1
    assert result["ticks"] <= ticks_per_frame * result["frames"] <= 2 * result["ticks"]
    assert curve["val_completion"].between(0, 1).all()
    assert result["config"]["algorithm"] == algorithm and len(result["seeds"]) == 3
    assert math.isclose(sum(result["completions"]["edf"]) / 3, result["edf"])
    # each kind of algorithm gets its recipe (TINY sets the batch sizes, not gamma)
    assert result["config"]["gamma"] == {"qmix": 0.99, "vdn": 0.99}.get(algorithm, 0.95)


@pytest.mark.parametrize(
    "argv, message",
    [
        ("--algorithm dqn", "invalid choice: 'dqn'"),
        ("--interval 2", "interval=2 needs stay=True (--stay)"),
        ("--actor gnn", "invalid choice: 'gnn'"),
    ],
)
def test_the_command_line_names_bad_settings(argv, message):
    proc = run_script(SCRIPT, *argv.split())
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]


def test_the_curve_plot_draws_the_shipped_runs(tmp_path):
    runs = sorted((Path(__file__).resolve().parents[3] / "docs" / "data" / "marl_60min").iterdir())
    out = tmp_path / "curves.png"
    proc = run_script("examples/plot_marl_curves.py", *map(str, runs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
