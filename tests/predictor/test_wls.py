"""WLS and Optimus baselines and the shared remaining-work distribution."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flow_predictor.optimus import OptimusPredictor, fit_optimus
from flow_predictor.remaining import MIN_RATIO, RemainingWork
from flow_predictor.wls import WLSPredictor, fit_power_law


def noisy_power_law(a: float, b: float, n: int, sigma: float, seed: int):
    rng = np.random.default_rng(seed)
    w = np.cumsum(rng.uniform(5, 15, n))
    return w, a * w**-b * np.exp(rng.normal(0, sigma, n))


def test_wls_recovers_known_power_laws_batched():
    cases = [(3.0, 0.5, 200), (0.8, 0.2, 80), (10.0, 1.0, 40)]
    data = [noisy_power_law(a, b, n, 0.02, i) for i, (a, b, n) in enumerate(cases)]
    fit = fit_power_law([w for w, _ in data], [y for _, y in data], discount=0.98)
    for (a, b, _), la, bb in zip(cases, fit.log_a, fit.b):
        assert bb == pytest.approx(b, rel=0.08)
        assert np.exp(la) == pytest.approx(a, rel=0.3)


def test_wls_weights_recent_reports_more():
    w = np.arange(1, 101, dtype=float)
    loss = np.where(w <= 50, w**-1.0, 50**-1.0 * (w / 50) ** -0.2)  # slows down at w=50
    steep = fit_power_law([w], [loss], discount=1.0).b[0]
    recent = fit_power_law([w], [loss], discount=0.8).b[0]
    assert recent == pytest.approx(0.2, abs=0.03)
    assert steep > 0.5


def test_wls_predicted_work_and_never_reaching():
    w = np.arange(1, 51, dtype=float) * 10
    law = fit_power_law([w], [2.0 * w**-0.5], ridge=0.0)
    assert law.predicted_work(0.02)[0] == pytest.approx((2.0 / 0.02) ** 2, rel=1e-6)
    flat = [w, w[:1], w]
    losses = [np.full(50, 0.3), np.array([0.3]), 0.1 * w**0.1]
    rw = WLSPredictor().predict(flat, losses, np.array([0.1, 0.1, 0.05]))
    assert np.isinf(rw.samples[0, 0]) and np.isinf(rw.samples[2, 0])
    assert np.isnan(rw.samples[1, 0]) and rw.fallback.tolist() == [False, True, False]


def test_remaining_is_floored_and_quantiles_degenerate():
    w, loss = noisy_power_law(3.0, 0.5, 60, 0.0, 0)
    q = WLSPredictor().predict_remaining([w], [loss], np.array([loss[-1] * 1.5]), (0.1, 0.5, 0.9))
    assert np.allclose(q, MIN_RATIO * w[-1])


def test_optimus_fits_its_own_family():
    w = np.linspace(10, 1000, 60)
    loss = 1.0 / (0.01 * w + 1.0) + 0.05
    a, b, c = fit_optimus(w, loss)
    assert c == pytest.approx(0.05, abs=0.01)
    rem = OptimusPredictor().predict([w], [loss], np.array([0.06])).samples[0, 0]
    true = (1.0 / 0.01 - 1.0) / 0.01
    assert rem == pytest.approx(true - w[-1], rel=0.2)
    below_asymptote = OptimusPredictor().predict([w], [loss], np.array([0.04])).samples[0, 0]
    assert np.isinf(below_asymptote)


def test_remaining_work_quantiles_and_probabilities():
    s = np.array([[1.0, 2.0, 3.0, 4.0, np.inf], [np.nan] * 5])
    rw = RemainingWork(samples=s, fallback=np.array([False, True]))
    q = rw.quantiles([0.1, 0.5, 0.9, 1.0])
    assert q[0, 1] == 3.0 and np.isinf(q[0, 2]) and np.isinf(q[0, 3])
    assert q[0, 0] <= q[0, 1] <= q[0, 2]
    p = rw.prob_within(np.array([2.5, 1.0]))
    assert p[0] == pytest.approx(0.4) and np.isnan(p[1])


def test_wls_module_does_not_import_torch():
    import subprocess

    code = "import flow_predictor.wls, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
