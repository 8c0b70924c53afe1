"""The calibrated remaining-work model: its recalibration (offline and online, censored
expiries included), the quantile network, the features a scheduler may read, its file
(and every defect of one), the shipped models and the command that fits them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flow_predictor.calibration import (
    BINS,
    BUCKETS,
    Recalibration,
    bucket_of,
    pit,
    read_curves,
)
from flow_predictor.checkpoint import CheckpointError, load_predictor
from flow_predictor.deadline_prior import DeadlinePrior
from flow_predictor.quantile_net import QuantileNetConfig, fit_quantile_net
from flow_predictor.remaining import FLOW_SAMPLES, REFRESH, PredictionCache
from flow_predictor.task_work import (
    FEATURES,
    LEVELS,
    SHIPPED_TASK_WORK,
    SHIPPED_TASK_WORK_NO_FLOW,
    TaskWork,
    TaskWorkModel,
    task_features,
)
from mara_agents.cli import main
from mara_agents.commands.task_work import PLAYER
from mara_agents.evaluation.registry import make_scheduler
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import EDF
from mara_env.traces import load_traces


def test_report_counts_fall_in_their_buckets() -> None:
    assert bucket_of(np.array([0, 1, 2, 3, 5, 6, 10, 11, 400])).tolist() == [
        0, 1, 2, 3, 3, 4, 4, 5, 5
    ]  # fmt: skip


def test_pit_and_reading_curves_invert_each_other() -> None:
    levels = np.array([0.1, 0.5, 0.9])
    curves = np.array([[0.0, 1.0, 3.0], [-1.0, 0.0, 1.0]])
    u = pit(np.array([0.5, 0.5]), curves, levels)
    assert u == pytest.approx([0.3, 0.7])
    assert read_curves(curves, levels, u[:, None])[:, 0] == pytest.approx([0.5, 0.5])
    assert pit(np.array([99.0, -99.0]), curves, levels).tolist() == [1.0, 0.0]


def test_a_calibrated_history_reads_the_nominal_levels() -> None:
    rng = np.random.default_rng(0)
    n = 20000
    recal = Recalibration.fit(rng.random(n), np.zeros(n, np.int64), np.zeros(n, np.int64), 1)
    taus = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    assert recal.levels(np.array([0]), np.array([0]), taus)[0] == pytest.approx(taus, abs=0.02)


def test_an_overconfident_history_widens_the_levels_read() -> None:
    # truths fall in the model's tails more often than its levels say
    n = 20000
    u = np.clip(np.random.default_rng(1).normal(0.5, 0.4, n), 0, 1)
    recal = Recalibration.fit(u, np.full(n, 4), np.zeros(n, np.int64), 1)
    lo, hi = recal.levels(np.array([4]), np.array([0]), np.array([0.1, 0.9]))[0]
    assert lo < 0.05 and hi > 0.95
    # a bucket the history lacks stays as predicted
    same = recal.levels(np.array([0]), np.array([0]), np.array([0.1, 0.9]))[0]
    assert same == pytest.approx([0.1, 0.9])


def test_each_group_is_recalibrated_on_its_own_and_the_last_pools_them() -> None:
    rng = np.random.default_rng(2)
    n = 20000
    # group 0: the model is too sure (its truths in the tails); group 1: too unsure
    u = np.concatenate([rng.random(n) ** 3, 0.5 + (rng.random(n) - 0.5) * 0.3])
    groups = np.repeat([0, 1], n)
    recal = Recalibration.fit(u, np.zeros(2 * n, np.int64), groups, 2)
    assert recal.pooled == 2
    median = recal.levels(np.zeros(3, np.int64), np.array([0, 1, 2]), np.array([0.5]))[:, 0]
    assert median[0] == pytest.approx(0.5**3, abs=0.02)  # group 0's own median PIT
    assert median[1] == pytest.approx(0.5, abs=0.02)
    width = recal.levels(np.zeros(2, np.int64), np.array([0, 1]), np.array([0.1, 0.9]))
    assert width[1, 1] - width[1, 0] < 0.3  # group 1 is read narrower than nominal


def test_online_updates_move_the_calibration_and_reset_forgets_them() -> None:
    recal = Recalibration(np.full((2, len(BUCKETS), BINS), 1.0))
    at = (np.array([1]), np.array([1]), np.array([0.5]))
    before = recal.levels(*at)[0, 0]
    for _ in range(200):  # every task needed more than the model's 90 % quantile
        recal.observe(0.95, 1, 1, censored=False)
    assert recal.levels(*at)[0, 0] > 0.9 > before
    assert recal.levels(np.array([1]), np.array([0]), np.array([0.5]))[0, 0] == before
    recal.reset()
    assert recal.levels(*at)[0, 0] == pytest.approx(before)


def test_a_censored_expiry_moves_mass_only_above_its_level() -> None:
    recal = Recalibration(np.full((1, len(BUCKETS), BINS), 1.0))
    mass = recal.mass[0, 0].copy()
    recal.observe(0.7, 0, 0, censored=True)
    gained = recal.mass[0, 0] - mass
    assert gained[:70].sum() == 0 and gained.sum() == pytest.approx(1.0)


def test_a_history_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="groups x"):
        Recalibration(np.ones((len(BUCKETS), BINS)))


def test_the_quantile_network_learns_conditional_quantiles() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (6000, 2))
    y = 2 * x[:, 0] + (0.2 + 0.5 * (x[:, 1] > 0)) * rng.standard_normal(6000)
    levels = np.array([0.1, 0.5, 0.9])
    config = QuantileNetConfig(hidden=32, epochs=30, batch_size=256, seed=0)
    net, record = fit_quantile_net(x[:5000], y[:5000], levels, config, x[5000:], y[5000:],
                                   progress=False)  # fmt: skip
    curves = net.curves(x[5000:])
    assert (np.diff(curves, axis=1) > 0).all()  # ascending by construction
    inside = (curves[:, 0] <= y[5000:]) & (y[5000:] <= curves[:, 2])
    assert 0.7 < inside.mean() < 0.9
    wide = x[5000:, 1] > 0
    width = curves[:, 2] - curves[:, 0]
    assert width[wide].mean() > 2 * width[~wide].mean()  # it tells the noisier half apart
    assert record["best_val"] == min(e["val"] for e in record["epochs"])


def _played(config: ClusterConfig, ticks: int = 12) -> ClusterSim:
    sim = ClusterSim(config, load_traces(split=config.split))
    sim.reset(np.random.default_rng(3))
    edf = EDF()
    edf.reset(sim, np.random.default_rng(0))
    for _ in range(ticks):
        sim.tick(edf.assign(sim))
    return sim


def test_features_read_only_what_a_scheduler_knows() -> None:
    config = ClusterConfig(split="val")
    sim = _played(config)
    tasks = sim.active()
    x, scale, _ = task_features(sim, tasks, DeadlinePrior.load(), None)
    assert x.shape == (len(tasks), len(FEATURES)) and np.isfinite(x).all()
    # the same features whatever the hidden truth: change every task's true work
    sim.truth.work_true[:] *= 3.0
    x2, _, _ = task_features(sim, tasks, DeadlinePrior.load(), None)
    assert np.array_equal(x, x2)
    assert (scale > 0).all()


@pytest.mark.parametrize("path", [SHIPPED_TASK_WORK, SHIPPED_TASK_WORK_NO_FLOW])
def test_the_shipped_models_were_fitted_on_train_and_calibrated_on_val(path) -> None:
    model = TaskWorkModel.load(path)
    assert model.fitted_on["train_split"] == "train"
    assert model.fitted_on["calibration_split"] == "val"
    assert model.uses_flow == (path == SHIPPED_TASK_WORK)


def test_the_source_gives_calibrated_quantiles_from_arrival_on() -> None:
    config = ClusterConfig(split="val")
    sim = _played(config, ticks=1)
    model = TaskWorkModel.load(SHIPPED_TASK_WORK)
    flow = PredictionCache(load_predictor(n_samples=FLOW_SAMPLES), REFRESH)
    source = TaskWork(model, DeadlinePrior.load(), flow, 64)
    tasks = sim.active()
    rw = source.get(sim, tasks)
    assert rw.samples.shape == (len(tasks), 64) and np.isfinite(rw.samples).all()
    assert (np.diff(rw.samples, axis=1) >= 0).all() and not rw.fallback.any()
    assert source.get(sim, np.zeros(0, np.int64)).samples.shape == (0, 64)
    with pytest.raises(ValueError, match="flow"):
        TaskWork(model, DeadlinePrior.load(), None, 64)


def test_tasks_that_end_update_the_run_s_calibration_and_clear_resets_it_unless_told() -> None:
    config = ClusterConfig(split="val", load=2.0)
    sim = ClusterSim(config, load_traces(split="val"))
    sim.reset(np.random.default_rng(0))
    source = TaskWork(TaskWorkModel.load(SHIPPED_TASK_WORK_NO_FLOW), DeadlinePrior.load(), None, 32)
    start = source.recalibration.mass.copy()
    edf = EDF()
    edf.reset(sim, np.random.default_rng(0))
    while not sim.done:
        source.get(sim, sim.active())
        sim.tick(edf.assign(sim))
    source.get(sim, np.zeros(0, np.int64))
    assert source.recalibration.mass.sum() > start.sum()  # each ended task added its mass
    moved = source.recalibration.mass.copy()
    source.clear(calibration=False)  # the next day of the same cluster: the updates stay
    assert np.array_equal(source.recalibration.mass, moved) and not source._open
    source.clear()
    assert np.array_equal(source.recalibration.mass, start)


@pytest.mark.parametrize(
    "content, words",
    [
        (b"not a checkpoint", "torch.load failed"),
        ({"format": "other"}, "not a remaining-work model"),
        ({"format": "mara-task-work", "version": 99}, "version 99"),
        ({"format": "mara-task-work", "version": 1, "features": ["x"]}, "features"),
    ],
)
def test_a_bad_model_file_is_a_one_line_error_naming_it(tmp_path, content, words) -> None:
    path = tmp_path / "bad.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(CheckpointError, match=words) as info:
        TaskWorkModel.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="no such"):
        TaskWorkModel.load(tmp_path / "missing.pt")


def test_a_model_file_round_trips(tmp_path) -> None:
    model = TaskWorkModel.load(SHIPPED_TASK_WORK_NO_FLOW)
    model.save(tmp_path / "m.pt")
    again = TaskWorkModel.load(tmp_path / "m.pt")
    x = np.random.default_rng(0).normal(size=(5, len(FEATURES)))
    assert np.array_equal(model.curves(x), again.curves(x))
    assert np.allclose(model.recalibration.history, again.recalibration.history)
    assert again.curves(x).shape == (5, len(LEVELS))


def test_the_command_fits_and_writes_both_models(tmp_path, capsys) -> None:
    out, no_flow = tmp_path / "tw.pt", tmp_path / "nf.pt"
    argv = [
        "predictor", "task-work", "--out", str(out), "--no-flow-out", str(no_flow),
        "--episodes", "1", "--calibration-episodes", "1", "--deadline-models", "padded",
        "--jobs", "none", "--loads", "1.0", "--epochs", "2", "--device", "cpu", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    assert TaskWorkModel.load(out).uses_flow and not TaskWorkModel.load(no_flow).uses_flow
    assert TaskWorkModel.load(out).fitted_on["deadline_models"] == ["padded"]
    assert TaskWorkModel.load(out).fitted_on["played_by"] == PLAYER
    assert main(argv) == 2 and "--force" in capsys.readouterr().err  # exists
    bad = list(argv)
    bad[bad.index("--deadline-models") + 1] = "padded,psychic"
    bad[bad.index("--out") + 1] = str(tmp_path / "x.pt")
    assert main(bad) == 2 and "psychic" in capsys.readouterr().err
    bad[bad.index("--device") + 1] = "tpu9"
    assert main(bad) == 2 and "--device tpu9" in capsys.readouterr().err


def test_the_player_of_the_rows_pins_its_knobs() -> None:
    # the shipped models were fitted on hedge without urgency; a default of hedge that
    # changed since must not change the rows the command records
    player = make_scheduler(PLAYER)
    assert player.predictor == "deadline"
    assert player.params.urgency == 0.0 and player.params.miss_cost == 1.0
