"""Flow-matching predictor: training, sampling, checkpoints, bad input, CLI evaluation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from flow_predictor.checkpoint import (
    SHIPPED_CHECKPOINT,
    CheckpointError,
    load_predictor,
    read_checkpoint,
    save_checkpoint,
)
from flow_predictor.evaluate import FAMILY_COLUMNS, METRIC_COLUMNS
from flow_predictor.features import COND_DIM, TARGET_DIM, crossing_ratio
from flow_predictor.flow import FlowPredictor, Normalisation
from flow_predictor.model import FlowConfig, VelocityNet, cfm_loss
from flow_predictor.remaining import FLOW_SAMPLES
from flow_predictor.train import TrainConfig, build_dataset, fit_normalisation, train
from mara_env.traces import TraceSet, validate_traces, write_traces

torch.set_num_threads(1)


def synthetic_frame(n_traces: int = 24, seed: int = 0) -> pd.DataFrame:
    """Noisy power laws with plateaus, three fake families, every split."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_traces):
        n = int(rng.integers(60, 120))
        w = np.arange(1, n + 1) * float(rng.uniform(2, 20))
        b, c = rng.uniform(0.2, 1.0), rng.uniform(0.0, 0.1)
        loss = (w / w[0]) ** -b + c
        loss = loss * np.exp(rng.normal(0, 0.03, n))
        split = ("train", "train", "val", "test")[i % 4]
        for s, v in zip(w, loss):
            rows.append((f"syn-{i}", ("a", "b", "c")[i % 3], f"src{i}", s, v, split))
    return pd.DataFrame(rows, columns=["trace_id", "family", "source", "step", "loss", "split"])


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lib") / "syn.parquet"
    write_traces(synthetic_frame(), path)
    return str(path)


@pytest.fixture(scope="module")
def traces() -> TraceSet:
    return TraceSet.from_frame(validate_traces(synthetic_frame()))


def small_predictor(seed: int = 0, **kwargs) -> FlowPredictor:
    torch.manual_seed(seed)
    net = VelocityNet(FlowConfig(COND_DIM, TARGET_DIM, hidden=32, depth=2, cond_hidden=16))
    norm = Normalisation(
        np.zeros(COND_DIM, np.float32),
        np.ones(COND_DIM, np.float32),
        np.full(TARGET_DIM, -0.05, np.float32),
        np.full(TARGET_DIM, 0.05, np.float32),
    )
    return FlowPredictor(net, norm, **kwargs)


def test_training_steps_reduce_the_cfm_loss(traces):
    cfg = TrainConfig(prefixes_per_trace=20)
    data = build_dataset(traces, cfg, np.random.default_rng(0))
    norm = fit_normalisation(data)
    cond = torch.as_tensor((data.cond - norm.cond_mean) / norm.cond_std)
    x1 = torch.as_tensor((data.target - norm.target_mean) / norm.target_std)
    mask = torch.as_tensor(data.mask)
    torch.manual_seed(0)
    net = VelocityNet(FlowConfig(COND_DIM, TARGET_DIM, hidden=64, depth=2, cond_hidden=32))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)

    def evaluate() -> float:
        g = torch.Generator().manual_seed(123)
        with torch.no_grad():
            return float(cfm_loss(net, x1, cond, mask, generator=g))

    before = evaluate()
    for _ in range(150):
        idx = torch.randint(0, len(x1), (128,), generator=gen)
        loss = cfm_loss(net, x1[idx], cond[idx], mask[idx], generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert evaluate() < 0.8 * before


def prefixes(traces: TraceSet, n: int = 30):
    works = [traces.trace(i)[0][:n] for i in range(4)]
    losses = [traces.trace(i)[1][:n] for i in range(4)]
    targets = np.array([0.8 * x.min() for x in losses])
    return works, losses, targets


def test_sampling_shape_determinism_and_batch_independence(traces):
    works, losses, targets = prefixes(traces)
    p = small_predictor(n_samples=16)
    a = p.predict(works, losses, targets)
    b = small_predictor(n_samples=16).predict(works, losses, targets)
    assert a.samples.shape == (4, 16)
    np.testing.assert_array_equal(a.samples, b.samples)
    alone = p.predict(works[2:3], losses[2:3], targets[2:3])
    np.testing.assert_allclose(alone.samples[0], a.samples[2], rtol=1e-5)  # matmul blocking
    assert p.fit(works, losses).traj.shape == (4, 16, TARGET_DIM)


@pytest.mark.parametrize("method, steps", [("euler", 4), ("midpoint", 3)])
def test_numpy_sampler_agrees_with_the_torch_velocity_net(method, steps):
    """The numpy solver copies the torch net's weights: it must integrate the same ODE.

    Tolerance: both run in float32, summing in different orders (BLAS against torch's
    kernels).  A layer of width 256 with O(1) terms rounds its sums by up to ~256 x 6e-8
    = 1.5e-5; four layers over four steps of the O(1) normalised trajectory stay within
    1e-4 absolute."""
    from flow_predictor.model import Sampler

    net = load_predictor().net
    rng = np.random.default_rng(0)
    cond = rng.standard_normal((5, COND_DIM)).astype(np.float32)
    noise = rng.standard_normal((7, TARGET_DIM)).astype(np.float32)
    with torch.no_grad():  # the ODE written directly on the torch module
        emb = net.encode(torch.from_numpy(cond)).repeat_interleave(len(noise), 0)
        x = torch.from_numpy(noise).repeat(len(cond), 1)
        dt = 1.0 / steps
        for k in range(steps):
            t = torch.full((len(x), 1), k * dt)
            v = net(x, t, emb)
            if method == "midpoint":
                v = net(x + 0.5 * dt * v, t + 0.5 * dt, emb)
            x = x + dt * v
    got = Sampler(net, steps, method)(cond, noise)
    assert got.shape == (len(cond), len(noise), TARGET_DIM)
    np.testing.assert_allclose(got, x.reshape(got.shape).numpy(), rtol=0, atol=1e-4)


def test_remaining_quantiles_are_monotone(traces):
    works, losses, targets = prefixes(traces)
    q = small_predictor().predict_remaining(works, losses, targets, (0.1, 0.25, 0.5, 0.75, 0.9))
    finite = np.where(np.isinf(q), 1e300, q)
    assert np.all(np.diff(finite, axis=1) >= 0)
    assert np.all(q > 0)


def test_crossing_interpolates_in_log_work():
    traj = np.linspace(-0.05, -3.15, TARGET_DIM)[None, :]
    r = crossing_ratio(traj, np.array([-1.0]))
    from flow_predictor.features import FUTURE_RATIOS

    h = int(np.argmax(traj[0] <= -1.0))
    assert FUTURE_RATIOS[h - 1] < r[0] <= FUTURE_RATIOS[h]
    assert np.isinf(crossing_ratio(traj, np.array([-5.0]))[0])


def test_short_prefix_falls_back_to_wls_and_is_flagged(traces):
    w, y = traces.trace(0)
    rw = small_predictor().predict([w[:2], w[:1], w[:20]], [y[:2], y[:1], y[:20]], np.full(3, 0.1))
    assert rw.fallback.tolist() == [True, True, False]
    assert rw.samples.shape[1] == FLOW_SAMPLES and np.all(rw.samples[0] == rw.samples[0, 0])
    assert np.isnan(rw.samples[1]).all() and np.isnan(rw.prob_within(1e9)[1])


def test_checkpoint_round_trip(tmp_path, traces):
    p = small_predictor(seed=3)
    path = tmp_path / "flow.pt"
    save_checkpoint(path, p.net, p.norm)
    q = load_predictor(path)
    works, losses, targets = prefixes(traces)
    np.testing.assert_array_equal(
        p.predict(works, losses, targets).samples, q.predict(works, losses, targets).samples
    )


@pytest.mark.parametrize("case", ["missing", "corrupt", "foreign", "version", "grid", "weights"])
def test_bad_checkpoints_raise_clear_errors(tmp_path, case):
    path = tmp_path / "bad.pt"
    p = small_predictor()
    if case != "missing":
        save_checkpoint(path, p.net, p.norm)
        blob = torch.load(path, weights_only=True)
    if case == "corrupt":
        path.write_bytes(b"this is not a checkpoint" * 10)
    elif case == "foreign":
        torch.save({"weights": torch.zeros(3)}, path)
    elif case == "version":
        torch.save({**blob, "version": 99}, path)
    elif case == "grid":
        grids = {**blob["grids"], "future_ratios": blob["grids"]["future_ratios"][:-1]}
        torch.save({**blob, "grids": grids}, path)
    elif case == "weights":
        torch.save({**blob, "model_config": {**blob["model_config"], "hidden": 48}}, path)
    expected = {
        "missing": "no such checkpoint file",
        "corrupt": r"not a flow-predictor checkpoint \(torch.load failed",
        "foreign": "not a flow-predictor checkpoint",
        "version": "format version 99",
        "grid": "grid 'future_ratios' does not match",
        "weights": "model config and weights do not fit",
    }[case]
    with pytest.raises(CheckpointError, match=expected) as err:
        load_predictor(path)
    assert str(path) in str(err.value)


def test_shipped_checkpoint_loads():
    blob = read_checkpoint(SHIPPED_CHECKPOINT)
    assert blob["version"] == 1
    assert load_predictor().net.config.target_dim == TARGET_DIM


def test_train_resume_and_cli_evaluate(tmp_path, library):
    from mara_agents.cli import main

    out = tmp_path / "run" / "flow.pt"
    cfg = TrainConfig(
        traces=library,
        out=str(out),
        epochs=1,
        prefixes_per_trace=8,
        hidden=32,
        depth=1,
        cond_hidden=16,
        val_samples=8,
    )
    train(cfg, progress=False)
    assert out.exists() and out.with_suffix(".last.pt").exists()
    assert any((tmp_path / "run" / "tb").iterdir())
    train(TrainConfig(**{**cfg.__dict__, "epochs": 2}), resume=True, progress=False)
    assert read_checkpoint(out.with_suffix(".last.pt"))["train"]["epoch"] == 2
    rc = main(
        [
            "predictor",
            "evaluate",
            "--traces",
            library,
            "--checkpoint",
            str(out),
            "--out",
            str(tmp_path / "eval"),
            "--samples",
            "8",
        ]
    )
    assert rc == 0
    metrics = pd.read_csv(tmp_path / "eval" / "predictor_metrics.csv")
    assert tuple(metrics.columns) == METRIC_COLUMNS
    assert set(metrics["method"]) == {"flow", "wls", "optimus"}
    families = pd.read_csv(tmp_path / "eval" / "predictor_families.csv")
    assert tuple(families.columns) == FAMILY_COLUMNS
    assert set(families["family"]) == {"a", "b", "c"}
    assert np.allclose(families.loc[families["method"] == "wls", "mae_vs_wls"], 1.0)
    assert families[["coverage50", "coverage80"]].apply(lambda c: c.between(0, 1)).all().all()
    flow = families[families["method"] == "flow"]
    assert (flow["coverage50"] <= flow["coverage80"]).all()  # nested intervals
    assert (tmp_path / "eval" / "predictor_error.png").stat().st_size > 0
    assert (
        main(
            [
                "predictor",
                "evaluate",
                "--split",
                "test",
                "--checkpoint",
                str(tmp_path / "nope.pt"),
                "--out",
                str(tmp_path / "e2"),
            ]
        )
        == 2
    )


def tiny(library: str, out, **kw) -> TrainConfig:
    """A training run of seconds on the synthetic library."""
    base = dict(
        traces=library,
        out=str(out),
        epochs=1,
        prefixes_per_trace=8,
        hidden=32,
        depth=1,
        cond_hidden=16,
        val_samples=8,
    )
    return TrainConfig(**{**base, **kw})


def test_pretraining_on_the_prior_then_fine_tuning(tmp_path, library):
    out = tmp_path / "flow.pt"
    cfg = tiny(library, out, prior_curves=30, prior_epochs=2, prior_prefixes=5)
    best = train(cfg, progress=False)
    assert best["prior_best"]["epoch"] in (1, 2)
    prior, tuned = read_checkpoint(out.with_suffix(".prior.pt")), read_checkpoint(out)
    assert prior["train"]["stage"] == "prior" and tuned["train"]["stage"] == "library"
    # fine-tuning starts from the pretrained weights: it moved them, by a little
    w0, w1 = (b["state_dict"]["encoder.0.weight"] for b in (prior, tuned))
    assert not torch.equal(w0, w1) and torch.allclose(w0, w1, atol=0.2)
    # resuming the fine-tuning stage does not pretrain again
    train(TrainConfig(**{**cfg.__dict__, "epochs": 2}), resume=True, progress=False)
    last = read_checkpoint(out.with_suffix(".last.pt"))["train"]
    assert (last["stage"], last["epoch"]) == ("library", 2)


def test_prior_only_model_and_the_library_is_not_read(tmp_path, library):
    out = tmp_path / "flow.pt"
    cfg = tiny(library, out, epochs=0, prior_curves=20, prior_epochs=1, prior_prefixes=5)
    train(cfg, progress=False)
    blob = read_checkpoint(out)
    assert blob["train"]["stage"] == "prior" and blob["calibration"]["spread"] > 0
    with pytest.raises(ValueError, match="epochs=0 and prior_curves=0"):
        TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="prior_epochs=0"):
        TrainConfig(prior_epochs=0)


def test_excluded_family_is_left_out_and_an_unknown_one_is_named(tmp_path, library):
    from flow_predictor.train import load_split
    from mara_env.traces import TraceError

    cfg = tiny(library, tmp_path / "f.pt", exclude_families=("b",))
    assert set(load_split(cfg, "train").families) == {"a", "c"}
    assert set(load_split(cfg, "val").families) == {"a", "c"}
    with pytest.raises(TraceError, match=r"unknown family \['zz'\]"):
        load_split(tiny(library, tmp_path / "f.pt", exclude_families=("zz",)), "train")


def test_lofo_command_trains_without_each_family_and_scores_on_it(tmp_path, library):
    from flow_predictor.lofo import LOFO_COLUMNS
    from mara_agents.cli import main

    out = tmp_path / "lofo"
    argv = ["predictor", "lofo", "--traces", library, "--out", str(out), "--epochs", "1"]
    argv += ["--prefixes-per-trace", "4", "--hidden", "16", "--depth", "1", "--samples", "8"]
    assert main([*argv, "--families", "a,c", "--quiet"]) == 0
    table = pd.read_csv(out / "lofo.csv")
    assert tuple(table.columns) == LOFO_COLUMNS
    assert table["held_out"].tolist() == ["a", "c"]
    assert np.allclose(table["mae_vs_wls"], table["mae_flow"] / table["mae_wls"])
    for family in ("a", "c"):
        cfg = read_checkpoint(out / family / "flow.pt")["train"]["config"]
        assert list(cfg["exclude_families"]) == [family]
    assert main([*argv, "--families", "zz", "--out", str(tmp_path / "bad")]) == 1
