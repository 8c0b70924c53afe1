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
        ("mappo", "--stay --actor slots"),
        ("vdn", "--actor slots"),
    ],
)
def test_algorithm_trains_evaluates_and_writes_outputs(example, tmp_path, algorithm, opt_in):
    out = tmp_path / "run"
    result = example.main(f"--algorithm {algorithm} {opt_in} {TINY} --out {out}".split())
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
    saved = json.loads((out / "result.json").read_text())
    assert saved["config"]["algorithm"] == algorithm and len(saved["seeds"]) == 3
    assert math.isclose(sum(saved["completions"]["edf"]) / 3, result["edf"])
    assert math.isclose(saved[algorithm], result[algorithm])


def test_the_command_line_names_bad_settings(example, capsys):
    with pytest.raises(SystemExit):
        example.parse_args(["--algorithm", "dqn"])
    assert "invalid choice: 'dqn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse_args(["--interval", "2"])
    assert "interval=2 needs stay=True (--stay)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse_args(["--actor", "gnn"])
    assert "invalid choice: 'gnn'" in capsys.readouterr().err


def test_each_kind_of_algorithm_gets_its_recipe_unless_told(example):
    mappo, qmix = example.Config(algorithm="mappo"), example.Config(algorithm="qmix")
    assert (mappo.gamma, mappo.frames_per_batch, mappo.minibatch) == (0.95, 2048, 256)
    assert (qmix.gamma, qmix.frames_per_batch, qmix.minibatch) == (0.99, 512, 128)
    told = example.parse_args("--algorithm ippo --gamma 0.99 --frames-per-batch 64".split())
    assert (told.gamma, told.frames_per_batch, told.minibatch) == (0.99, 64, 256)
    # shaping changes the training reward only; evaluation envs keep the registered one
    shaped = example.Config(shaping=4.0)
    assert shaped.env_kwargs("train")["shaping"] == 4.0
    assert "shaping" not in shaped.env_kwargs("val")


def test_the_curve_plot_draws_the_shipped_runs(tmp_path):
    plot = load_script(SCRIPT.parent / "plot_marl_curves.py")
    runs = sorted((SCRIPT.parents[1] / "docs" / "data" / "marl_60min").iterdir())
    out = plot.main([*map(str, runs), "--out", str(tmp_path / "curves.png")])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_slot_scorer_treats_slots_alike(example):
    """Permuting the slot rows permutes the slot outputs and leaves idle and stay alone;
    the own task's row is found through ``is_mine`` wherever it sits."""
    from mara_env.cluster_env import NODE_FEATURES, SLOT_FEATURES

    torch.manual_seed(0)
    k, nd, sd = 5, len(NODE_FEATURES), len(SLOT_FEATURES)
    net = example.SlotScorer(k, k + 2, hidden=8)
    rows = torch.randn(3, 2, k, sd)  # batch, agents, slots, features
    rows[..., SLOT_FEATURES.index("occupied")] = 1.0
    rows[..., SLOT_FEATURES.index("is_mine")] = 0.0
    rows[:, :, 1, SLOT_FEATURES.index("is_mine")] = 1.0
    node = torch.randn(3, 2, nd)
    out = net(torch.cat([node, rows.flatten(-2)], -1))
    assert out.shape == (3, 2, k + 2)
    perm = torch.tensor([3, 1, 4, 0, 2])
    moved = net(torch.cat([node, rows[..., perm, :].flatten(-2)], -1))
    torch.testing.assert_close(moved[..., :k], out[..., :k][..., perm])
    torch.testing.assert_close(moved[..., k:], out[..., k:])
    # a different own task changes every output
    rows[:, :, 1, SLOT_FEATURES.index("is_mine")] = 0.0
    rows[:, :, 2, SLOT_FEATURES.index("is_mine")] = 1.0
    other = net(torch.cat([node, rows.flatten(-2)], -1))
    assert not torch.allclose(other[..., k:], out[..., k:])
