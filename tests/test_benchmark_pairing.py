"""The training-throughput benchmark's arithmetic: each iteration over the bare-env turns
around it, CPU time by role between synchronous samples (no Ray run here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_script

bench = load_script(Path(__file__).parents[1] / "benchmarks" / "rllib_throughput.py")


def _results(decisions_per_iteration: list[float]) -> list[dict]:
    lifetime = np.cumsum(decisions_per_iteration)
    return [{"mara": {"node_decisions": float(d)}} for d in lifetime]


def test_each_iteration_is_divided_by_the_bare_turns_around_it():
    # turn 0 before iteration 1, turn i after iteration i; the host slows down during the
    # run, the bare env and the training alike: every paired ratio is the same
    bare = [(1000.0, 900.0), (1000.0, 900.0), (1000.0, 900.0), (600.0, 500.0), (400.0, 300.0)]
    cpu = {"all": np.array([9.0, 2.0, 2.5, 4.0]), "env runners": np.array([5.0, 1.0, 1.0, 2.0])}
    walls = np.array([9.0, 1.0, 1.0, 2.0])
    tp = bench.throughput(_results([1e4, 1000, 1000, 1000]), walls, cpu, bare, cpus=2)
    # iterations 2-4: 1000 decisions in 2, 2.5 and 4 CPU s on 2 CPUs
    np.testing.assert_allclose(tp.per_iteration, [1000.0, 800.0, 500.0])
    # over (1000+1000)/2, (1000+600)/2 and (600+400)/2
    np.testing.assert_allclose(tp.ratios, [1.0, 1.0, 1.0])
    assert tp.decisions == 3000
    assert tp.cpu_per_iteration["env runners"] == pytest.approx(4.0 / 3)
    assert tp.busy == pytest.approx(8.5 / 4.0 / 2)
    # against one bare figure for the whole run the same iterations would read 1.0 to 0.5
    assert np.ptp(tp.per_iteration / np.median([b[0] for b in bare])) == pytest.approx(0.5)


def test_iteration_three_is_paired_with_turns_two_and_three():
    bare = [(1.0, 1.0), (2.0, 2.0), (4.0, 4.0), (8.0, 8.0)]
    cpu = {"all": np.ones(3)}
    tp = bench.throughput(_results([5, 1, 1]), np.ones(3), cpu, bare, cpus=1)
    np.testing.assert_allclose(tp.ratios, [1 / 3, 1 / 6])  # over (2+4)/2, then (4+8)/2


def test_one_iteration_is_refused():
    with pytest.raises(RuntimeError, match="raise --seconds"):
        bench.throughput(_results([5]), np.ones(1), {"all": np.ones(1)}, [(1, 1)] * 2, cpus=1)


def test_cpu_spent_between_samples_by_role():
    clock = bench.TreeClock()
    me = bench.os.getpid()
    clock.used = [{me: 1.0, 7: 0.0}, {me: 2.0, 7: 3.0}, {me: 2.5, 7: 3.0}, {me: 4.0, 7: 4.0}]
    clock.names = {7: "ray::SingleAgentEnvRunner.sample()"}
    spent = clock.spent([(0, 1), (2, 3)])  # what happened between samples 1 and 2 is left out
    np.testing.assert_allclose(spent["driver"], [1.0, 1.5])
    np.testing.assert_allclose(spent["env runners"], [3.0, 1.0])
    np.testing.assert_allclose(spent["all"], [4.0, 2.5])


def test_one_by_one_asks_for_rllibs_own_vector_env():
    # mara train turns the shared-predictor vector env on by default: the benchmark's
    # --one-by-one has to ask for RLlib's own back
    from mara_agents.training.ppo import build_config
    from mara_agents.training.rllib_env import VECTOR_MODE

    together = build_config(bench.experiment("mara.yaml", "none", 10, together=True))
    alone = build_config(bench.experiment("mara.yaml", "none", 10, together=False))
    assert together.gym_env_vectorize_mode == VECTOR_MODE["gym_env_vectorize_mode"]
    assert alone.gym_env_vectorize_mode == "sync"


predictor_bench = load_script(Path(__file__).parents[1] / "benchmarks" / "predictor_speed.py")


def test_paired_episodes_time_the_same_episode_in_every_env():
    from flow_predictor.wls import WLSPredictor
    from flow_predictor.wrapper import PredictorFeatures
    from mara_env.cluster_env import env

    kw = {"num_nodes": 4, "num_slots": 4, "horizon": 12}
    makers = {
        "env": lambda: env(**kw),
        "+ wls": lambda: PredictorFeatures(env(**kw), WLSPredictor()),
    }
    times = predictor_bench.paired_episodes(makers, 3)
    assert [len(t) for t in times.values()] == [3, 3] and all((t > 0).all() for t in times.values())
    # the same seed gives the same episode: as many steps in the bare env as wrapped
    assert (
        predictor_bench.episode_time(makers["env"](), 1)[1]
        == predictor_bench.episode_time(makers["+ wls"](), 1)[1]
    )
    # envs that play different episodes are refused, not averaged
    other = {"env": lambda: env(**kw), "bigger": lambda: env(**{**kw, "num_nodes": 6})}
    with pytest.raises(RuntimeError, match="steps"):
        predictor_bench.paired_episodes(other, 2)
