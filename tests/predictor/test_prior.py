"""The synthetic learning-curve prior (flow_predictor.prior)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from flow_predictor.prior import (
    EFFECTS,
    FAMILIES,
    RL_EFFECTS,
    PriorConfig,
    prior_traces,
    sample_curves,
)
from mara_env.traces import LOSS_FLOOR


@pytest.fixture(scope="module")
def curves():
    return sample_curves(600, seed=11)


def test_the_same_seed_gives_the_same_curves_and_another_seed_others():
    a, b, c = sample_curves(20, seed=4), sample_curves(20, seed=4), sample_curves(20, seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.steps, y.steps)
        np.testing.assert_array_equal(x.loss, y.loss)
        assert (x.family, x.effects, x.rl) == (y.family, y.effects, y.rl)
    assert any(len(x.loss) != len(z.loss) or (x.loss != z.loss).any() for x, z in zip(a, c))


def test_curves_are_valid_loss_curves_within_the_configured_ranges(curves):
    cfg = PriorConfig()
    for c in curves:
        assert cfg.n_points[0] <= len(c.steps) == len(c.loss) <= cfg.n_points[1]
        assert np.all(np.diff(c.steps) > 0) and c.steps[0] > 0
        assert 10 ** cfg.log10_work[0] <= c.steps[-1] * (1 + 1e-9)
        assert c.steps[-1] <= 10 ** cfg.log10_work[1] * (1 + 1e-9)
        assert np.all(np.isfinite(c.loss)) and np.all(c.loss >= LOSS_FLOOR)
        if c.rl:
            assert np.all(c.loss <= 1.0)  # 1 - normalised return
    # curves mostly go down: the median curve ends well below where it started
    drop = np.median([c.loss[-10:].mean() / c.loss[:10].mean() for c in curves])
    assert drop < 0.7


def test_every_family_and_effect_appears(curves):
    families = Counter(c.family for c in curves)
    effects = Counter(e for c in curves for e in c.effects)
    assert set(families) == set(FAMILIES)
    assert set(effects) == set(EFFECTS)
    assert min(families.values()) >= 30
    # RL effects only on RL-like curves, and RL-like curves are a quarter of the draws
    assert all(c.rl for c in curves if set(c.effects) & set(RL_EFFECTS))
    assert 0.15 < np.mean([c.rl for c in curves]) < 0.35


def test_turning_an_effect_off_removes_it():
    cfg = PriorConfig(effect_prob={"warmup": 1.0}, rl_share=0.0)
    drawn = sample_curves(40, seed=1, config=cfg)
    assert all(c.effects[0] == "warmup" and len(c.effects) == 2 for c in drawn)
    assert not any(c.rl for c in drawn)


def test_prior_traces_is_a_trace_set_with_one_source_per_curve():
    traces = prior_traces(12, seed=2)
    assert len(traces) == 12
    assert set(traces.families) == {"prior"}
    steps, loss = traces.trace(3)
    ref = sample_curves(12, seed=2)[3]
    np.testing.assert_allclose(steps, ref.steps)
    np.testing.assert_allclose(loss, ref.loss)


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        ({"n_points": (5, 10)}, "n_points"),
        ({"top": (2.0, 1.0)}, "top"),
        ({"floor_fraction": (0.1, 1.5)}, "floor_fraction"),
        ({"rl_share": 1.5}, "rl_share"),
        ({"effect_prob": {"warmup": -0.1}}, "warmup"),
        ({"effect_prob": {"lr_spike": 0.1}}, "lr_spike"),
        ({"noise_prob": {"gaussian": 1.0}}, "noise_prob"),
    ],
)
def test_bad_configuration_is_one_error_naming_it(kwargs, culprit):
    with pytest.raises(ValueError, match=f"prior: .*{culprit}"):
        PriorConfig(**kwargs)


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="n=-1"):
        sample_curves(-1)
