"""Predictor features of many envs at once: what each env computes alone, one predictor call.

:func:`flow_predictor.wrapper.features_together` serves an RLlib env runner's vectorised
envs (:class:`mara_agents.training.rllib_env.RoundVectorEnv`): one predictor call for the
new or grown tasks of all of them, one pass over all their slots.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flow_predictor.checkpoint import load_predictor
from flow_predictor.wrapper import PredictorFeatures, features_together
from mara_env.cluster_env import env

torch.set_num_threads(1)
SMALL = {"num_nodes": 4, "num_slots": 3, "horizon": 20, "load": 3.0}


@pytest.fixture(scope="module")
def flow():
    return load_predictor(n_samples=16)


def count_fits(monkeypatch, predictor) -> list[int]:
    """The number of prefixes of each of ``predictor``'s fits from now on."""
    calls: list[int] = []
    fit = predictor.fit_batches

    def counted(batches):
        calls.append(sum(len(w) for w, _ in batches))
        return fit(batches)

    monkeypatch.setattr(predictor, "fit_batches", counted)
    return calls


def test_features_together_are_each_envs_own(flow, monkeypatch) -> None:
    together = [PredictorFeatures(env(**SMALL), flow) for _ in range(3)]
    alone = [PredictorFeatures(env(**SMALL), flow) for _ in range(3)]
    for seed, (a, b) in enumerate(zip(together, alone)):
        a.reset(seed=seed)
        b.reset(seed=seed)
    calls = count_fits(monkeypatch, flow)
    rng = np.random.default_rng(0)
    ticks = 0
    for _ in range(12 * SMALL["num_nodes"]):
        if together[0].unwrapped.engine.agents.index(together[0].agent_selection) == 0:
            before = len(calls)
            features_together(together)  # the tick's predictions: at most one call
            assert len(calls) - before <= 1
            ticks += 1
        for a, b in zip(together, alone):
            obs_a, _, term, trunc, _ = a.last()
            obs_b = b.last()[0]
            for key in obs_a:  # one ODE solve for all: BLAS blocks rows otherwise
                np.testing.assert_allclose(obs_a[key], obs_b[key], rtol=0, atol=1e-5)
            action = (
                None if term or trunc else int(rng.choice(np.flatnonzero(obs_a["action_mask"])))
            )
            a.step(action)
            b.step(action)
    assert ticks >= 10 and sum(calls) > 0  # the flow model predicted something


def test_round_vector_env_steps_as_its_envs_alone(monkeypatch) -> None:
    from mara_agents.training.rllib_env import RoundVectorEnv, round_env_creator

    # env v2's deadlines: episodes short enough that several end within the steps below
    config = {
        "cluster": {**SMALL, "deadline_model": "unbiased"},
        "wrapper": "flow",
        "loads": [1.0, 3.0],
    }
    vec = round_env_creator({**config, "num_envs": 3})
    assert isinstance(vec, RoundVectorEnv) and vec.num_envs == 3
    predictors = {id(e.aec.predictor) for m in vec.envs for e in m.envs}
    assert len(predictors) == 1  # one predictor for all the runner's envs
    calls = count_fits(monkeypatch, vec.envs[0].envs[0].aec.predictor)
    alone = [round_env_creator(dict(config)) for _ in range(3)]
    obs, _ = vec.reset(seed=[0, 1, 2])
    for i, e in enumerate(alone):
        o, _ = e.reset(seed=i)
        for key in o:
            np.testing.assert_array_equal(obs[key][i], o[key])
    rng = np.random.default_rng(0)
    nvec = vec.single_action_space.nvec
    ended = np.zeros(3, bool)
    episodes = 0
    for _ in range(5 * SMALL["horizon"]):
        actions = rng.integers(0, nvec[0], size=(3, len(nvec)))
        before = len(calls)
        obs, reward, term, trunc, _ = vec.step(actions)
        assert len(calls) - before <= 1  # one predictor call per step of all envs
        for i, e in enumerate(alone):
            if ended[i]:  # next-step autoreset, as gymnasium's vector envs
                o, (r, t, u) = e.reset()[0], (0.0, False, False)
            else:
                o, r, t, u, _ = e.step(actions[i])
            for key in o:
                np.testing.assert_allclose(obs[key][i], o[key], rtol=0, atol=1e-5)
            assert (reward[i], term[i], trunc[i]) == (r, t, u)
        ended = term | trunc
        episodes += int(ended.sum())
    assert episodes >= 3 and sum(calls) > 0  # through resets, with flow predictions
