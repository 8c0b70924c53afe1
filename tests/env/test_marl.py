"""mara_env.marl.StayWrapper: PettingZoo's parallel API and seed tests, the stay action,
the conflict rule, the decision interval and the reward."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test
from pettingzoo.test.seed_test import parallel_seed_test

from mara_env import marl, parallel_env
from mara_env.cluster_env import InvalidActionError
from mara_env.schedulers import EDF, SchedulerAgent, run_episode
from tests.conftest import SMALL


def random_valid(seed: int):
    """A policy of uniformly random valid actions: observations -> actions."""
    rng = np.random.default_rng(seed)
    return lambda obs: {
        a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()
    }


@pytest.mark.parametrize("interval", [1, 3])
def test_parallel_api_test_passes(interval):
    parallel_api_test(marl.parallel_env(interval=interval, **SMALL), num_cycles=300)


def test_seed_test_passes():
    parallel_seed_test(functools.partial(marl.parallel_env, interval=2, **SMALL))


def test_default_env_is_unchanged_and_spaces_add_stay():
    base, env = parallel_env(**SMALL), marl.parallel_env(**SMALL)
    k = SMALL["num_slots"]
    assert base.action_space("node_0").n == k + 1 and env.action_space("node_0").n == k + 2
    assert env.observation_space("node_0")["action_mask"].shape == (k + 2,)
    assert env.observation_space("node_0")["state"] == base.observation_space("node_0")["state"]


def test_a_scheduler_that_never_conflicts_plays_as_on_the_simulator():
    # EDF's per-node actions stay within every cap: the wrapper changes nothing for them.
    env = marl.parallel_env(**SMALL)
    for seed in range(3):
        agent = SchedulerAgent(EDF())
        env.reset(seed=seed)
        agent.reset(env, seed)
        while env.agents:
            env.step(dict(zip(env.possible_agents, agent.act_round(env).tolist())))
        engine = env.unwrapped.engine
        assert engine.sim.metrics() == run_episode(EDF(), engine.config, engine.traces, seed)


def test_stay_keeps_every_node_on_its_task_and_its_bit_marks_a_visible_task():
    env = marl.parallel_env(**SMALL)
    sim = env.unwrapped.engine.sim
    observations, _ = env.reset(seed=1)
    k = SMALL["num_slots"]
    while env.agents and not (sim.node_task >= 0).any():
        observations, *_ = env.step({a: 0 for a in env.agents})  # someone joins slot 0
    assert env.agents
    served = sim.node_task.copy()
    _, node_slot = env.unwrapped.engine.node_rows()
    for i, a in enumerate(env.possible_agents):
        assert observations[a]["action_mask"][k + 1] == (node_slot[i] >= 0)
    moves = sim.stats.reassignments
    env.step({a: k + 1 for a in env.agents})
    assert sim.stats.reassignments == moves
    still = sim.node_task >= 0  # a task that completed or expired frees its nodes
    assert np.array_equal(sim.node_task[still], served[still])


def first_round_with_tasks(env, tasks: int) -> None:
    """Reset ``env`` on the first seed whose first round shows ``tasks`` tasks or more."""
    engine = env.unwrapped.engine
    for seed in range(100):
        env.reset(seed=seed)
        if (engine.slot_tasks >= 0).sum() >= tasks:
            return
    raise AssertionError(f"no episode of the first 100 seeds starts with {tasks} tasks")


def test_nodes_that_lost_a_race_spill_to_the_next_slots_with_room():
    env = marl.parallel_env(num_nodes=8, num_slots=4, horizon=25, load=2.0)
    engine = env.unwrapped.engine
    first_round_with_tasks(env, 2)  # no node serves a task yet
    n, k = 8, engine.config.num_slots
    out, infos = env.resolve({a: 0 for a in env.possible_agents})  # all ask for slot 0
    caps = np.where(engine.slot_tasks >= 0, engine.slot_cap, 0)
    expected = (np.repeat(np.arange(k), caps).tolist() + [k] * n)[:n]  # slot order, then idle
    assert out.tolist() == expected
    for i, a in enumerate(env.possible_agents):
        assert infos.get(a, {}) == ({} if i < caps[0] else {"bumped": 0, "granted": expected[i]})


def test_a_node_that_lost_a_race_stays_on_its_own_task():
    env = marl.parallel_env(num_nodes=8, num_slots=4, horizon=25, load=2.0)
    engine = env.unwrapped.engine
    env.reset(seed=0)
    checked = 0
    while env.agents:
        _, node_slot = engine.node_rows()
        if (node_slot >= 0).any():  # everyone asks for the last slot a node serves
            target = int(node_slot.max())
            out, infos = env.resolve({a: target for a in env.possible_agents})
            assert (out == target).sum() == min(engine.slot_cap[target], 8)
            for i, a in enumerate(env.possible_agents):
                if "bumped" in infos.get(a, {}) and node_slot[i] >= 0:
                    assert out[i] == infos[a]["granted"] == node_slot[i]
                    checked += 1
        env.step({a: 0 for a in env.possible_agents})  # nodes spread over the slots
    assert checked > 0


def test_masked_and_out_of_space_actions():
    k = SMALL["num_slots"]
    env = marl.parallel_env(**SMALL)
    env.reset(seed=0)
    _, _, _, _, infos = env.step({"node_0": k + 1})  # stay without a task
    assert infos["node_0"] == {"masked_action": k + 1, "masked_actions_total": 1}
    with pytest.raises(InvalidActionError, match=r"node_1: action 9 is outside .*Discrete"):
        env.step({"node_1": 9})
    strict = marl.parallel_env(strict=True, **SMALL)
    strict.reset(seed=0)
    with pytest.raises(
        InvalidActionError, match=r"node_0: action 5 is masked out \(it serves no visible task\)"
    ):
        strict.step({"node_0": k + 1})
    with pytest.raises(ValueError, match="interval=0"):
        marl.parallel_env(interval=0, **SMALL)


@pytest.mark.parametrize("interval", [1, 2, 4])
def test_interval_steps_that_many_ticks_and_the_return_counts_completions(interval):
    env = marl.parallel_env(interval=interval, **SMALL)
    sim = env.unwrapped.engine.sim
    for seed in range(4):
        observations, _ = env.reset(seed=seed)
        choose, steps = random_valid(seed), 0
        total = 0.0
        while env.agents:
            observations, rewards, *_ = env.step(choose(observations))
            total += rewards["node_0"]
            steps += 1
            assert sim.t == steps * interval or not env.agents
        assert total == pytest.approx(sim.metrics()["completed"])


def test_the_hand_rules_run_through_the_opt_in():
    """examples/stay_rules.py as a user runs it: every rule completes a share of the tasks
    and leads EDF by its own rate minus EDF's; uniform share through the opt-in completes
    what uniform share does on the same episodes."""
    import re

    from tests.conftest import run_script

    argv = "--nodes 6 --slots 4 --horizon 20 --episodes 3 --eval-seed 2"
    proc = run_script("examples/stay_rules.py", *argv.split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rates = {
        name: (float(rate), lead and float(lead))
        for name, rate, lead in re.findall(
            r"^  (\S+) +(\S+) ± \S+(?:   (\S+) ± \S+)?$", proc.stdout, re.MULTILINE
        )
    }
    rules = ("stay_first", "stay_fewest", "uniform_through_stay")
    assert set(rates) == {*rules, "edf", "uniform", "random"}, proc.stdout
    for name in rules:
        rate, lead = rates[name]
        assert 0.0 <= rate <= 1.0 and abs(lead - (rate - rates["edf"][0])) <= 1e-3  # 3 digits
    assert rates["uniform_through_stay"][0] == rates["uniform"][0]
