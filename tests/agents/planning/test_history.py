"""A cluster's own history: which settings it is drawn under, the shipped files as the fits
of the default settings, and fits for other settings (the same on every call); the price
of a miss tuned on it (shipped tunings read, the choice rule, an unseen cluster tuned)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from flow_predictor.deadline_prior import HISTORY_PRIORS, SHIPPED_PRIOR, DeadlinePrior
from mara_agents.planning.history import (
    cluster_prior,
    fit_prior,
    history_settings,
    shipped_choices,
)
from mara_env.config import ClusterConfig


def test_history_settings_leave_out_the_episode_and_the_cluster_size() -> None:
    assert history_settings(ClusterConfig()) == {}
    episode = ClusterConfig(num_nodes=64, num_slots=16, load=2.0, split="test", horizon=60)
    assert history_settings(episode) == {}
    users = ClusterConfig(deadline_model="blind", slack_range=(1.0, 2.0), num_nodes=64)
    assert history_settings(users) == {"deadline_model": "blind", "slack_range": [1.0, 2.0]}


def test_the_shipped_files_are_the_fits_of_the_default_settings() -> None:
    prior = cluster_prior(ClusterConfig(num_nodes=64, load=2.0))
    shipped = DeadlinePrior.load(SHIPPED_PRIOR)
    assert prior.fitted_on == shipped.fitted_on
    np.testing.assert_array_equal(prior.log_ratios, shipped.log_ratios)
    philly = cluster_prior(ClusterConfig(jobs="philly"), own_workload=True)
    assert philly.fitted_on == DeadlinePrior.load(HISTORY_PRIORS["philly"]).fitted_on
    # and fitting the default history again gives the shipped file's values
    fitted = fit_prior({}, jobs=("none",))
    synthetic = DeadlinePrior.load(HISTORY_PRIORS[None])
    assert {**fitted.fitted_on} == synthetic.fitted_on
    np.testing.assert_array_equal(fitted.log_ratios, synthetic.log_ratios)
    np.testing.assert_array_equal(fitted.log_windows, synthetic.log_windows)


def test_other_users_get_their_own_history() -> None:
    blind = ClusterConfig(deadline_model="blind")
    prior = cluster_prior(blind, own_workload=True)
    assert prior.fitted_on["cluster"] == {"deadline_model": "blind"}
    assert prior.fitted_on["jobs"] == ["none"]
    assert cluster_prior(blind.replace(load=1.5), own_workload=True) is prior  # fitted once
    again = fit_prior({"deadline_model": "blind"}, jobs=("none",))  # the same draws
    np.testing.assert_array_equal(again.log_ratios, prior.log_ratios)
    # padded users ask for about 3x the time their task needs; blind ones about the time
    # a typical task needs: the work the deadline implies is less padded
    shipped = DeadlinePrior.load(HISTORY_PRIORS[None])
    assert np.median(prior.log_ratios) > np.median(shipped.log_ratios) + 0.4
    json.dumps(prior.fitted_on)  # a plain record, as a file stores it


def test_the_shipped_tunings_are_read_not_played_again(monkeypatch) -> None:
    from mara_agents.planning import history

    monkeypatch.setattr(history, "tune_miss_cost", lambda *a, **k: pytest.fail("tuned again"))
    history._miss_cost.cache_clear()
    try:
        # the default users pad their estimates: a miss is priced at a tenth of the time left
        assert history.cluster_miss_cost(ClusterConfig(num_nodes=64, load=2.0)) == 0.1
        assert history.cluster_miss_cost(ClusterConfig(deadline_model="unbiased")) == 1.0
        assert history.cluster_miss_cost(ClusterConfig(deadline_model="blind")) == 1.0
    finally:
        history._miss_cost.cache_clear()
    for record in shipped_choices():  # each choice follows the rule from its own leads
        first, *others = record["fitted_on"]["candidates"]
        above = {float(p): m for p, v in record["leads"].items() for m, h in [v["all"]] if m > h}
        assert record["miss_cost"] == (max(above, key=above.get) if above else first)


def _fake_play(lead: float, spread: float, free_lead: float | None = None):
    """A stand-in for an episode of ``hedge:miss_cost=m``: completion 0.5 (today's rule) or
    0.5 + ``lead`` + noise of ``spread`` (m < 1; ``free_lead`` instead where m is 0, when
    given), the same on every call for a seed."""

    def play(hedge, config, traces, seed):
        noise = np.random.default_rng([seed, int(config.load * 10)]).normal(0, spread)
        price = hedge.params.miss_cost
        if price == 1.0:
            return {"completion_rate": 0.5}
        gain = free_lead if price == 0.0 and free_lead is not None else lead
        return {"completion_rate": 0.5 + gain + noise}

    return play


def test_a_cheaper_price_is_kept_only_when_its_lead_is_resolved(monkeypatch) -> None:
    import mara_env.schedulers
    from mara_agents.planning.history import MISS_COSTS, tune_miss_cost

    assert MISS_COSTS == (1.0, 0.1, 0.0)  # today's rule first, then the cheaper prices
    monkeypatch.setattr(mara_env.schedulers, "run_episode", _fake_play(0.02, 0.001, 0.01))
    record = tune_miss_cost({}, episodes=3)
    assert record["miss_cost"] == 0.1
    assert record["leads"]["0.1"]["all"][0] == pytest.approx(0.02, abs=0.002)
    assert record["leads"]["0"]["all"][0] == pytest.approx(0.01, abs=0.002)
    assert set(record["leads"]["0.1"]) == {"all"} | {
        f"{j}@{v:g}" for j in ("none", "philly") for v in (1.0, 1.5, 2.0)
    }
    # the largest resolved lead wins, whichever candidate it is
    monkeypatch.setattr(mara_env.schedulers, "run_episode", _fake_play(0.01, 0.001, 0.03))
    assert tune_miss_cost({}, episodes=3)["miss_cost"] == 0.0
    monkeypatch.setattr(mara_env.schedulers, "run_episode", _fake_play(0.002, 0.05))
    assert tune_miss_cost({}, episodes=3)["miss_cost"] == 1.0  # within noise: today's rule
    monkeypatch.setattr(mara_env.schedulers, "run_episode", _fake_play(-0.02, 0.001))
    assert tune_miss_cost({}, episodes=3)["miss_cost"] == 1.0


def test_a_written_tuning_replaces_every_record_of_its_history(tmp_path) -> None:
    from mara_agents.planning.history import shipped_choices, write_choices

    def record(cluster, candidates, price):
        fitted = {"episodes": 20, "seed": 0, "cluster": cluster, "candidates": candidates}
        return {"fitted_on": fitted, "leads": {}, "miss_cost": price}

    path = tmp_path / "choices.json"
    old = [record({}, [1.0, 0.1], 0.1), record({"deadline_model": "blind"}, [1.0, 0.1], 1.0)]
    write_choices(old, path)
    assert shipped_choices(path) == old
    new = record({}, [1.0, 0.1, 0.0], 0.0)  # the same history tuned over more prices
    write_choices([new], path)
    assert shipped_choices(path) == [old[1], new]  # the stale default record is gone


def test_an_unseen_cluster_is_tuned_on_its_own_history_once(monkeypatch, caplog) -> None:
    from mara_agents.planning import history

    calls = []
    real = history.tune_miss_cost

    def tune(settings):
        calls.append(settings)
        return real(settings, episodes=1)  # real episodes of hedge, one per workload and load

    monkeypatch.setattr(history, "tune_miss_cost", tune)
    history._miss_cost.cache_clear()
    try:
        users = ClusterConfig(deadline_model="blind", slack_range=(1.0, 2.0))
        price = history.cluster_miss_cost(users)
        assert price in history.MISS_COSTS
        assert history.cluster_miss_cost(dataclasses.replace(users, load=2.0)) == price
    finally:
        history._miss_cost.cache_clear()
    assert calls == [{"deadline_model": "blind", "slack_range": [1.0, 2.0]}]
    assert "tuning miss_cost on this cluster's history" in caplog.text
