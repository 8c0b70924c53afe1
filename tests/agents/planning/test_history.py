"""A cluster's own history: which settings it is drawn under, the shipped files as the fits
of the default settings, and fits for other settings (the same on every call); the price
of a miss tuned on it (shipped tunings read, the choice rule, an unseen cluster tuned once,
in the parent, by the command or the harness); the distribution chosen per workload on it
(the rule, and a record of before that choice)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flow_predictor.deadline_prior import HISTORY_PRIORS, SHIPPED_PRIOR, DeadlinePrior
from mara_agents.planning.history import (
    DISTRIBUTIONS,
    ClusterHistory,
    HistoryError,
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
    prior = ClusterHistory.of(ClusterConfig(num_nodes=64, load=2.0)).prior
    shipped = DeadlinePrior.load(SHIPPED_PRIOR)
    assert prior.fitted_on == shipped.fitted_on
    np.testing.assert_array_equal(prior.log_ratios, shipped.log_ratios)
    philly = ClusterHistory.of(ClusterConfig(jobs="philly")).workload_prior
    assert philly.fitted_on == DeadlinePrior.load(HISTORY_PRIORS["philly"]).fitted_on
    # and fitting the default history again gives the shipped file's values
    fitted = fit_prior({}, jobs=("none",))
    synthetic = DeadlinePrior.load(HISTORY_PRIORS[None])
    assert {**fitted.fitted_on} == synthetic.fitted_on
    np.testing.assert_array_equal(fitted.log_ratios, synthetic.log_ratios)
    np.testing.assert_array_equal(fitted.log_windows, synthetic.log_windows)


def test_other_users_get_their_own_history() -> None:
    blind = ClusterConfig(deadline_model="blind")
    prior = ClusterHistory.of(blind).workload_prior
    assert prior.fitted_on["cluster"] == {"deadline_model": "blind"}
    assert prior.fitted_on["jobs"] == ["none"]
    assert ClusterHistory.of(blind.replace(load=1.5)).workload_prior is prior  # fitted once
    again = fit_prior({"deadline_model": "blind"}, jobs=("none",))  # the same draws
    np.testing.assert_array_equal(again.log_ratios, prior.log_ratios)
    # padded users ask for about 3x the time their task needs; blind ones about the time
    # a typical task needs: the work the deadline implies is less padded
    shipped = DeadlinePrior.load(HISTORY_PRIORS[None])
    assert np.median(prior.log_ratios) > np.median(shipped.log_ratios) + 0.4
    json.dumps(prior.fitted_on)  # a plain record, as a file stores it


def test_the_shipped_tunings_are_read_and_an_untuned_cluster_says_what_to_run() -> None:
    # the default users pad their estimates: a miss is priced at a tenth of the time left
    assert ClusterHistory.of(ClusterConfig(num_nodes=64, load=2.0)).price() == 0.1
    assert ClusterHistory.of(ClusterConfig(deadline_model="unbiased")).price() == 1.0
    assert ClusterHistory.of(ClusterConfig(deadline_model="blind")).price() == 1.0
    noisy = ClusterHistory.of(ClusterConfig(throughput_noise=0.2, reassign_cost=0.5))
    assert noisy.miss_cost is None
    with pytest.raises(HistoryError, match="mara history fit --cluster FILE --out"):
        noisy.price()
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
    from mara_agents.evaluation.tuning import tune_miss_cost
    from mara_agents.planning.history import MISS_COSTS

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


def test_an_unseen_cluster_is_tuned_once_in_the_parent_and_read_from_its_file(
    monkeypatch, tmp_path, capsys
) -> None:
    """``mara history fit`` writes the tuning a later run reads (``--history``); the
    harness's parent tunes an untuned cluster itself, once, when a spec needs its price."""
    from mara_agents.cli import main
    from mara_agents.evaluation import tuning

    calls = []
    real = tuning.tune_history

    def tune(settings, **kwargs):
        calls.append(settings)
        return real(settings, episodes=1, progress=kwargs.get("progress", False))

    monkeypatch.setattr(tuning, "tune_history", tune)
    users = ClusterConfig(deadline_model="blind", slack_range=(1.0, 2.0))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("deadline_model: blind\nslack_range: [1.0, 2.0]\n")
    out = tmp_path / "history.json"
    assert main(["history", "fit", "--cluster", str(cluster), "--out", str(out)]) == 0
    assert calls == [{"deadline_model": "blind", "slack_range": [1.0, 2.0]}]
    (record,) = shipped_choices(out)
    assert record["fitted_on"]["episodes"] == 1  # this test's tuning: not the one read
    record["fitted_on"]["episodes"] = 20  # as if the full tuning had been run
    out.write_text(json.dumps([record]))
    assert ClusterHistory.of(users).miss_cost is None
    read = ClusterHistory.of(users.replace(load=2.0), [out])
    assert read.price() == record["miss_cost"] and read.tuned
    assert set(record["distribution"]) == {"none", "philly"}
    assert read.distribution() == record["distribution"]["none"]
    assert read.distribution("philly") == record["distribution"]["philly"]
    twice = '[{"fitted_on": {}, "miss_cost": 1.0, "miss_cost": 0.0}]'
    for bad in ("not json", "{}", "[1]", twice):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(HistoryError, match="bad.json"):
            ClusterHistory.of(users, [tmp_path / "bad.json"])
    with pytest.raises(HistoryError, match="'miss_cost' is given twice"):
        ClusterHistory.of(users, [tmp_path / "bad.json"])
    with pytest.raises(HistoryError, match="missing.json"):
        ClusterHistory.of(users, [tmp_path / "missing.json"])
    # the harness's evaluate() never tunes: a spec that needs a price the history lacks is
    # refused before any episode, naming the command
    from mara_agents.evaluation.runner import evaluate

    with pytest.raises(HistoryError, match="^hedge: .*mara history fit"):
        evaluate(["uniform", "hedge"], [1.0], 1, config=users, workers=1, progress=False)
    # no file: the parent tunes, once, and only when a spec plans with the price or the
    # choice of distribution
    fixed = "hedge:predictor=task:miss_cost=1"  # reads the prior alone
    assert tuning.resolve_history(users, ["uniform", fixed]).miss_cost is None
    assert len(calls) == 1
    tuned = tuning.resolve_history(users, ["uniform", "hedge"], progress=False)
    assert tuned.miss_cost in (1.0, 0.1, 0.0) and len(calls) == 2
    assert tuned.distribution() in DISTRIBUTIONS
    # a spec that reads only the choice of distribution is tuned for too
    tuning.resolve_history(users, ["hedge:miss_cost=1"], progress=False)
    assert len(calls) == 3
    assert "mara history fit" in capsys.readouterr().err


def test_the_harness_hands_its_history_to_every_scheduler_and_agent(monkeypatch) -> None:
    """Built once by whoever starts the run: the schedulers and the policy of an evaluation
    read the history handed in, and none builds one of its own."""
    from mara_agents.evaluation.runner import evaluate
    from mara_agents.evaluation.tuning import resolve_history

    config = ClusterConfig(horizon=20, split="val")
    history = ClusterHistory.of(config)
    assert resolve_history(config, ["mara"]).miss_cost == 0.1  # plain mara: the shipped policy

    def again(cls, *args, **kwargs):
        pytest.fail("a cluster history was built again")

    monkeypatch.setattr(ClusterHistory, "of", classmethod(again))
    specs = ["hedge:predictor=deadline", "env=hedge:predictor=deadline:prior=workload", "mara"]
    df = evaluate(specs, [1.0], 1, config=config, workers=1, progress=False, history=history)
    assert len(df) == 3


def test_a_run_that_reads_no_history_builds_none(monkeypatch) -> None:
    from mara_agents.evaluation.runner import evaluate
    from mara_agents.evaluation.tuning import resolve_history

    def built(cls, *args, **kwargs):
        pytest.fail("a cluster history was built for specs that read none")

    monkeypatch.setattr(ClusterHistory, "of", classmethod(built))
    users = ClusterConfig(throughput_noise=0.2, horizon=20, split="val")
    specs = ["uniform", "lara", "hedge:predictor=flow:miss_cost=1"]
    assert resolve_history(users, specs) is None
    assert len(evaluate(specs, [1.0], 1, config=users, workers=1, progress=False)) == 3


def test_the_distribution_is_chosen_per_workload_only_on_a_resolved_lead(monkeypatch) -> None:
    import mara_env.schedulers
    from mara_agents.evaluation.tuning import choose_distribution

    assert DISTRIBUTIONS == ("task", "flow+deadline")  # the calibrated model first

    def play(lead_on: dict[str, float], spread: float):
        def run(hedge, config, traces, seed):
            if hedge.predictor == "task":
                return {"completion_rate": 0.5}
            noise = np.random.default_rng([seed, int(config.load * 10)]).normal(0, spread)
            return {"completion_rate": 0.5 + lead_on[config.jobs or "none"] + noise}

        return run

    monkeypatch.setattr(
        mara_env.schedulers, "run_episode", play({"none": 0, "philly": 0.02}, 0.001)
    )
    record = choose_distribution({}, 0.1, episodes=3)
    assert record["distribution"] == {"none": "task", "philly": "flow+deadline"}
    leads = record["distribution_leads"]["philly"]["flow+deadline"]
    assert leads["all"][0] == pytest.approx(0.02, abs=0.002)
    assert set(leads) == {"all"} | {f"philly@{v:g}" for v in (1.0, 1.5, 2.0)}
    # a lead within noise, or a loss, keeps the calibrated model
    monkeypatch.setattr(
        mara_env.schedulers, "run_episode", play({"none": 0.002, "philly": -0.02}, 0.05)
    )
    assert choose_distribution({}, 0.1, episodes=3)["distribution"] == {
        "none": "task",
        "philly": "task",
    }


def test_the_shipped_choices_follow_the_rule_and_a_record_without_one_says_what_to_run(
    tmp_path,
) -> None:
    for record in shipped_choices():  # each choice follows the rule from its own leads
        for job, chosen in record["distribution"].items():
            (other,) = record["distribution_leads"][job]
            mean, half = record["distribution_leads"][job][other]["all"]
            assert chosen == (other if mean > half else DISTRIBUTIONS[0])
    # the default cluster's users, tuned with urgency: the calibrated model on synthetic
    # tasks and on Philly's days (docs/baselines.md)
    default = ClusterHistory.of(ClusterConfig())
    assert (default.distribution(), default.distribution("philly")) == ("task", "task")
    assert ClusterHistory.of(ClusterConfig(jobs="philly")).distribution() == "task"
    assert default.distribution("my_jobs.parquet") == "task"  # not in the history: kept
    # a tuning written before the choice existed: its price is read, and the choice asked for
    users = ClusterConfig(throughput_noise=0.2)
    (record,) = [r for r in shipped_choices() if r["fitted_on"]["cluster"] == {}]
    old = {**record, "fitted_on": {**record["fitted_on"], "cluster": {"throughput_noise": 0.2}}}
    del old["fitted_on"]["distributions"], old["distribution"], old["distribution_leads"]
    (tmp_path / "old.json").write_text(json.dumps([old]))
    history = ClusterHistory.of(users, [tmp_path / "old.json"])
    assert history.price() == record["miss_cost"] and not history.tuned
    with pytest.raises(HistoryError, match="choice of distribution .*mara history fit"):
        history.distribution()
