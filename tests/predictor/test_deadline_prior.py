"""The deadline prior: fitting, conditioning on work done, fusion with the flow model's
samples, its file (and every defect of one), the shipped prior and the command that fits
it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import ndtri

from flow_predictor.deadline_prior import (
    NEIGHBOURS,
    SHIPPED_PRIOR,
    STORED_TASKS,
    DeadlineInformed,
    DeadlinePrior,
    combine,
    deadline_scale,
    fit_history,
)
from flow_predictor.remaining import MIN_RATIO, RemainingWork
from mara_agents.cli import main
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces
from mara_env.workload import sample_workload


def _sim(work_done: list[float], allowed: list[int], rate: float = 2.0) -> SimpleNamespace:
    """A simulation of tasks on 1 reference node (speed-up irrelevant), ``allowed`` ticks
    from arrival to deadline, ``rate`` work per tick."""
    k = len(work_done)
    workload = SimpleNamespace(
        arrival=np.zeros(k, np.int64),
        deadline=np.asarray(allowed, np.int64),
        rate=np.full(k, rate),
        alpha=np.full(k, 0.7),
        cap=np.ones(k, np.int64),
        ref=None,
    )
    return SimpleNamespace(
        workload=workload, config=ClusterConfig(), work=np.asarray(work_done, np.float64)
    )


def test_fit_keeps_a_seeded_sorted_history() -> None:
    rng = np.random.default_rng(0)
    scale = np.exp(rng.uniform(0, 5, 20_000))
    window = rng.integers(1, 100, len(scale))
    work = scale * np.exp(rng.normal(-1.0, 0.5, len(scale)))
    work[:10] = [np.inf, 0.0, np.nan, 1, 1, 1, 1, 1, 1, 1]  # never / instant / unknown: left out
    x, r = fit_history(work, scale, window)
    assert len(x) == len(r) == STORED_TASKS
    assert np.diff(x).min() >= 0 and np.isfinite(r).all()
    assert np.median(r) == pytest.approx(-1.0, abs=0.05)
    again = fit_history(work, scale, window)
    assert np.array_equal(again[1], r)  # same seed, same history
    with pytest.raises(ValueError, match="at least 2"):
        fit_history(np.array([np.inf, 1.0]), np.array([1.0, 0.0]), np.array([3, 3]))


def test_the_prior_reads_the_history_near_the_task_s_window() -> None:
    # two kinds of deadline: 10-tick windows whose tasks need about their scale, 100-tick
    # windows whose tasks need a tenth of it (a padded estimate)
    x = np.log(np.repeat([10.0, 100.0], 500))
    r = np.concatenate([np.zeros(500), np.full(500, np.log(0.1))])
    prior = DeadlinePrior(r, {}, x)
    near = prior.ratios_of(np.array([9, 110]))
    assert near.shape == (2, min(NEIGHBOURS, 1000))
    assert np.median(near[0]) == 0.0 and np.median(near[1]) == pytest.approx(np.log(0.1))
    flat = DeadlinePrior(np.sort(r), {})  # version 1: one distribution for every window
    assert np.array_equal(flat.ratios_of(np.array([9, 110]))[0], np.sort(r))


def test_remaining_work_is_the_prior_conditioned_on_the_work_done() -> None:
    # r uniform on [-1, 0]: total work scale * exp(r), scale = rate * allowed = 20
    prior = DeadlinePrior(np.linspace(-1.0, 0.0, 101), {})
    fresh = prior.remaining(_sim([0.0], [10]), np.array([0]), 64)
    assert np.median(fresh.samples) == pytest.approx(20 * np.exp(-0.5), rel=0.02)
    assert fresh.samples.min() >= 20 * np.exp(-1.0) - 1e-9
    assert fresh.samples.max() <= 20.0 + 1e-9
    # half the prior's mass lies below 20 exp(-0.5): 12.13 done leaves the upper half
    done = 20 * np.exp(-0.5)
    later = prior.remaining(_sim([done], [10]), np.array([0]), 64)
    assert (later.samples > 0).all()
    assert np.median(later.samples + done) == pytest.approx(20 * np.exp(-0.25), rel=0.02)
    # past every value of the prior: just ahead
    past = prior.remaining(_sim([25.0], [10]), np.array([0]), 8)
    assert past.samples.tolist() == [[MIN_RATIO * 25.0] * 8]
    assert not fresh.fallback.any()


def test_scale_uses_the_reference_allocation_and_its_speed_up() -> None:
    sim = _sim([0.0, 0.0], [10, 10])
    sim.workload.ref = np.array([1, 4])
    scale = deadline_scale(sim.workload, sim.config, np.array([0, 1]))
    assert scale.tolist() == pytest.approx([2.0 * 10, 2.0 * 4**0.7 * 10])


def test_fusion_is_a_product_of_log_normals() -> None:
    n = 2001
    z = ndtri((np.arange(n) + 0.5) / n)  # normal quantiles (as many as the fusion's)
    prior = RemainingWork(np.exp(1.0 + 0.5 * z)[None, :].repeat(3, 0), np.zeros(3, bool))
    flow_samples = np.exp(2.0 + 0.5 * z)[None, :].repeat(3, 0)
    flow_samples[1] = np.nan  # unknown
    flow_samples[2, n // 4 :] = np.inf  # a median of "not reached"
    flow = RemainingWork(flow_samples, np.array([False, True, False]))
    fused = combine(prior, flow, flow_spread=1.0)
    logs = np.log(fused.samples)
    assert np.median(logs[0]) == pytest.approx(1.5, abs=0.02)  # equal precisions: the middle
    iqr = np.subtract(*np.quantile(logs[0], [0.75, 0.25]))
    assert iqr == pytest.approx(1.349 * 0.5 / np.sqrt(2), rel=0.05)
    assert np.array_equal(fused.samples[1:], prior.samples[1:])  # the prior alone
    wide = combine(prior, flow, flow_spread=4.0)  # flow trusted less
    assert np.median(np.log(wide.samples[0])) < 1.1


def test_deadline_informed_serves_each_task_from_arrival_on() -> None:
    prior = DeadlinePrior(np.linspace(-1.0, 0.0, 11), {})
    source = DeadlineInformed(prior, None, 16)
    rw = source.get(_sim([0.0, 3.0], [10, 5]), np.array([0, 1]))
    assert rw.samples.shape == (2, 16) and np.isfinite(rw.samples).all()
    assert source.get(_sim([], []), np.zeros(0, np.int64)).samples.shape == (0, 16)


@pytest.mark.parametrize("windows", [None, np.log(np.arange(1, 10))])
def test_a_prior_file_round_trips(tmp_path, windows) -> None:
    prior = DeadlinePrior(np.linspace(-2.0, 0.5, 9), {"split": "train"}, windows)
    prior.save(tmp_path / "p.json")
    back = DeadlinePrior.load(tmp_path / "p.json")
    assert np.allclose(back.log_ratios, prior.log_ratios) and back.fitted_on == {"split": "train"}
    assert (back.log_windows is None) == (windows is None)
    if windows is not None:
        assert np.allclose(back.log_windows, windows)


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ('{"kind": "mara-policy"}', "expected a file of kind 'mara-deadline-prior'"),
        ('{"kind": "mara-deadline-prior", "version": 9}', "version 9; expected one of [1, 2]"),
        ('{"kind": "mara-deadline-prior", "version": 1, "fitted_on": {}}', "'log_ratios'"),
        (
            '{"kind": "mara-deadline-prior", "version": 1, "fitted_on": {}, '
            '"log_ratios": [0.5, 0.1]}',
            "ascending order",
        ),
        (
            '{"kind": "mara-deadline-prior", "version": 2, "fitted_on": {}, '
            '"log_ratios": [0.1, 0.2], "log_windows": [1.0]}',
            "as many as log_ratios",
        ),
        (
            '{"kind": "mara-deadline-prior", "version": 1, "fitted_on": {}, '
            '"log_ratios": [0.1, NaN]}',
            "finite",
        ),
        (
            '{"kind": "mara-deadline-prior", "version": 1, "fitted_on": {}, '
            '"log_ratios": [0.1, 0.2], "log_ratios": [0.3, 0.4]}',
            "key 'log_ratios' is given twice",
        ),
    ],
)
def test_a_bad_prior_file_is_a_one_line_error_naming_it(tmp_path, content, words) -> None:
    path = tmp_path / "prior.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        DeadlinePrior.load(path)
    message = str(err.value)
    assert str(path) in message and words in message and "\n" not in message


def test_the_shipped_prior_was_fitted_on_train_tasks_only() -> None:
    prior = DeadlinePrior.load()
    assert prior.fitted_on["split"] == "train"
    assert json.loads(SHIPPED_PRIOR.read_text())["kind"] == "mara-deadline-prior"
    # it speaks about val tasks' work: its median total at arrival is within a factor 2 of
    # the truth for most of them, better than a guess from the size range alone
    config = ClusterConfig(split="val", load=1.5)
    wl = sample_workload(config, load_traces(split="val"), np.random.default_rng(5))
    tasks = np.flatnonzero(np.isfinite(wl.work_true) & (wl.work_true > 0))
    scale = deadline_scale(wl, config, tasks)
    r = prior.ratios_of(wl.deadline[tasks] - wl.arrival[tasks])
    error = np.abs(np.log(scale * np.exp(np.median(r, axis=1)) / wl.work_true[tasks]))
    # the history near each window is closer to the truth than one distribution for all
    pooled = np.abs(np.log(scale * np.exp(np.median(prior.log_ratios)) / wl.work_true[tasks]))
    assert np.median(error) < min(np.log(2), np.median(pooled))


def test_the_command_fits_and_writes_a_prior(tmp_path, capsys) -> None:
    out = tmp_path / "prior.json"
    argv = ["predictor", "deadline-prior", "--episodes", "2", "--jobs", "none", "--out", str(out)]
    assert main(argv) == 0
    prior = DeadlinePrior.load(out)
    assert prior.fitted_on["split"] == "train" and prior.fitted_on["tasks"] > 50
    assert main(argv) == 2  # exists: a usage error
    assert "--force" in capsys.readouterr().err
    assert main([*argv, "--force", "--seed", "1"]) == 0
    assert main([*argv[:-2], "--loads", "1,,2", "--out", str(tmp_path / "x.json")]) == 2
    assert "--loads" in capsys.readouterr().err


def test_the_command_fits_under_a_cluster_file_s_deadline_model(tmp_path, capsys) -> None:
    (tmp_path / "blind.yaml").write_text("deadline_model: blind\n")
    out = tmp_path / "prior.json"
    argv = ["predictor", "deadline-prior", "--episodes", "2", "--jobs", "none", "--out", str(out)]
    assert main([*argv, "--cluster", str(tmp_path / "blind.yaml")]) == 0
    prior = DeadlinePrior.load(out)
    assert prior.fitted_on["cluster"] == {"deadline_model": "blind"}
    assert prior.log_windows is not None
    (tmp_path / "bad.yaml").write_text("load: 2\n")
    assert main([*argv, "--force", "--cluster", str(tmp_path / "bad.yaml")]) == 2
    assert "load" in capsys.readouterr().err


def test_the_synthetic_history_prior_is_the_synthetic_workloads_and_larger_at_short_deadlines():
    # docs/results.md ("Urgency"): the default prior, two thirds Philly jobs, thinks a
    # synthetic task with a short deadline is several times smaller than this history does
    synthetic = DeadlinePrior.load(SHIPPED_PRIOR.with_name("deadline_prior_synthetic.json"))
    assert synthetic.fitted_on["split"] == "train" and synthetic.fitted_on["jobs"] == ["none"]
    default = DeadlinePrior.load()
    assert "philly" in default.fitted_on["jobs"]
    windows = np.array([4.0, 8.0])
    ratio = np.exp(
        np.median(synthetic.ratios_of(windows), axis=1)
        - np.median(default.ratios_of(windows), axis=1)
    )
    assert (ratio > 3).all(), ratio
