"""A cluster's own history: which settings it is drawn under, the shipped files as the fits
of the default settings, and fits for other settings (the same on every call)."""

from __future__ import annotations

import json

import numpy as np

from flow_predictor.deadline_prior import HISTORY_PRIORS, SHIPPED_PRIOR, DeadlinePrior
from mara_agents.planning.history import cluster_prior, fit_prior, history_settings
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
