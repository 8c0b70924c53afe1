"""examples/torchrl_marl.py: every algorithm trains, evaluates and writes its outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torchrl", reason="torchrl is not installed (pip install -e '.[torchrl]')")
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from tests.conftest import load_script  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "torchrl_marl.py"
# A tiny cluster; the budget is spent after the first batches.  Base seed 2: the three
# evaluation episodes each hold a task at this horizon (rates are not nan).
TINY = (
    "--minutes 0.02 --eval-every 0.5 --nodes 4 --slots 3 --horizon 10 --frames-per-batch 64 "
    "--minibatch 32 --epochs 1 --updates 2 --hidden 16 --episodes 3 --curve-episodes 2 "
    "--eval-seed 2"
)


@pytest.fixture(scope="module")
def example():
    torch.set_num_threads(1)
    return load_script(SCRIPT)


@pytest.mark.parametrize(
    "algorithm, opt_in",
    [
        ("mappo", ""),
        ("ippo", ""),
        ("vdn", ""),
        ("qmix", "--stay"),
        ("mappo", "--stay --interval 2"),
    ],
)
def test_algorithm_trains_evaluates_and_writes_outputs(example, tmp_path, algorithm, opt_in):
    out = tmp_path / "run"
    result = example.main(f"--algorithm {algorithm} {opt_in} {TINY} --out {out}".split())
    for name in (algorithm, "random_actions", "random_policy", "edf", "uniform"):
        assert 0.0 <= result[name] <= 1.0, name
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
    saved = json.loads((out / "result.json").read_text())
    assert saved["config"]["algorithm"] == algorithm and len(saved["seeds"]) == 3
    assert math.isclose(saved[algorithm], result[algorithm])


def test_the_command_line_names_bad_settings(example, capsys):
    with pytest.raises(SystemExit):
        example.parse_args(["--algorithm", "dqn"])
    assert "invalid choice: 'dqn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse_args(["--interval", "2"])
    assert "interval=2 needs stay=True (--stay)" in capsys.readouterr().err
