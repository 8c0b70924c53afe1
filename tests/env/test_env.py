"""The PettingZoo environment: API conformance, spaces, invalid actions, rendering."""

from __future__ import annotations

import functools
import re
import types

import numpy as np
import pettingzoo
import pytest
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test, seed_test, state_test
from pettingzoo.test.seed_test import parallel_seed_test

import mara_env
from mara_env.cluster_env import InvalidActionError, env, env_name, parallel_env, raw_env
from tests.conftest import SMALL


def _module(**kw):
    return types.SimpleNamespace(
        env=functools.partial(env, **kw), parallel_env=functools.partial(parallel_env, **kw)
    )


def test_api_test_passes():
    api_test(env(**SMALL), num_cycles=300)


def test_parallel_api_test_passes():
    parallel_api_test(parallel_env(**SMALL), num_cycles=300)


def test_seed_tests_pass():
    seed_test(functools.partial(env, **SMALL), num_cycles=200)
    parallel_seed_test(functools.partial(parallel_env, **SMALL))


def test_max_cycles_test_passes():
    # PettingZoo's test resets without a seed and expects 4 full cycles; an episode whose
    # workload has no task at all ends after one round (about 3 % of SMALL's 25-tick
    # workloads), so arrivals run for 200 ticks here (an empty workload: ~e^-27).
    max_cycles_test(_module(**{**SMALL, "horizon": 200}))


def test_registered_in_pettingzoo_registry():
    e = pettingzoo.make("aec", mara_env.ENV_ID, **SMALL)
    e.reset(seed=0)
    # the name follows the registered id's version (it once said v0 after the id was v1)
    assert e.unwrapped.metadata["name"] == "mara_compute_cluster_v3"
    assert mara_env.parallel_env(**SMALL).metadata["name"] == env_name(mara_env.ENV_ID)
    p = pettingzoo.make("parallel", mara_env.ENV_ID, **SMALL)
    obs, _ = p.reset(seed=0)
    assert set(obs) == set(p.possible_agents)


def test_spaces_are_stable_objects_and_mask_is_int8():
    e = raw_env(**SMALL)
    e.reset(seed=1)
    a = e.possible_agents[0]
    assert e.observation_space(a) is e.observation_space(a)
    assert e.action_space(a) is e.action_space(a)
    obs = e.observe(a)
    assert obs["action_mask"].dtype == np.int8
    assert obs["action_mask"][-1] == 1
    assert e.observation_space(a).contains(obs)


def _first_masked_slot(obs):
    masked = np.flatnonzero(obs["action_mask"][:-1] == 0)
    return int(masked[0]) if len(masked) else None


def test_masked_action_counts_as_idle_and_is_reported():
    e = raw_env(**SMALL)
    e.reset(seed=3)
    last = e.possible_agents[-1]
    for agent in e.agent_iter(500):
        obs, *_ = e.last()
        slot = _first_masked_slot(obs)
        if slot is not None and agent != last:
            e.step(slot)
            info = e.infos[agent]
            assert info["masked_action"] == slot
            assert info["masked_actions_total"] == 1
            assert e.engine.assign[e.possible_agents.index(agent)] == -1  # served as idle
            return
        e.step(len(obs["action_mask"]) - 1)
    pytest.fail("no masked slot seen")


def test_nodes_pending_counts_the_task_nodes_still_to_choose():
    """Slot feature nodes_pending * cap = nodes that served the slot's task in the last
    tick and have not acted yet in this round (the acting node included)."""
    from mara_env.cluster_env import CAP_SCALE, SLOT_FEATURES

    e = raw_env(**{**SMALL, "num_slots": 8})
    e.reset(seed=1)
    rng = np.random.default_rng(0)
    k, d, f = 8, 8, len(SLOT_FEATURES)
    pend, cap = SLOT_FEATURES.index("nodes_pending"), SLOT_FEATURES.index("cap")
    seen = 0
    for agent in e.agent_iter(2000):
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            e.step(None)
            continue
        engine = e.engine
        i = e.possible_agents.index(agent)
        slots = obs["observation"][d:].reshape(k, f)
        later = engine.sim.node_task[i:]
        for s, task in enumerate(engine.slot_tasks):
            expected = int((later == task).sum()) if task >= 0 else 0
            assert round(float(slots[s, pend] * slots[s, cap] * CAP_SCALE)) == expected
            seen += expected
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    assert seen > 0


def test_slots_are_the_schedulers_deadline_order():
    """One deadline order: the env's slots are ``edf_order``'s first K tasks (the same
    function, so ``pred_share`` keeps flow_share's round-robin order)."""
    from mara_env import engine, schedulers

    assert engine.edf_order is schedulers.edf_order
    e = raw_env(**{**SMALL, "num_slots": 3, "load": 3.0})
    e.reset(seed=2)
    rng = np.random.default_rng(0)
    hidden = 0
    for _ in e.agent_iter(1500):
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            e.step(None)
            continue
        engine = e.engine
        order = schedulers.edf_order(engine.sim)
        visible = engine.slot_tasks[engine.slot_tasks >= 0]
        assert visible.tolist() == order[:3].tolist()
        assert engine.queued.tolist() == order[3:].tolist()
        hidden += len(engine.queued)
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    assert hidden > 0  # the order decided which tasks were visible


def test_strict_mode_raises_naming_agent_action_and_mask():
    e = raw_env(**SMALL, strict=True)
    e.reset(seed=3)
    for agent in e.agent_iter(500):
        obs, *_ = e.last()
        slot = _first_masked_slot(obs)
        if slot is not None:
            with pytest.raises(InvalidActionError, match=rf"{agent}: action {slot} is masked out"):
                e.step(slot)
            return
        e.step(len(obs["action_mask"]) - 1)
    pytest.fail("no masked slot seen")


OUTSIDE = [-1, 99, 2**70, 1.5, float("inf"), float("nan"), "x", None]


@pytest.mark.parametrize("action", OUTSIDE, ids=repr)
def test_action_outside_space_always_raises(action):
    e = raw_env(**SMALL)
    e.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"^node_0: action .* (outside|not an integer)"):
        e.step(action)


@pytest.mark.parametrize("make", ["env", "pettingzoo.make"])
@pytest.mark.parametrize("action", OUTSIDE, ids=repr)
def test_wrapped_env_raises_the_raw_envs_error_for_actions_outside_space(make, action):
    """Through the standard wrappers too: the agent and the value are named (PettingZoo's
    own assertion names neither, and 2**70 overflows there)."""
    e = env(**SMALL) if make == "env" else pettingzoo.make("aec", mara_env.ENV_ID, **SMALL)
    e.reset(seed=0)
    e.step(len(e.last()[0]["action_mask"]) - 1)  # node_0 idles; node_1 is next
    with pytest.raises(InvalidActionError, match=rf"^node_1: action {re.escape(repr(action))}"):
        e.step(action)
    assert e.agent_selection == "node_1"  # nothing happened


def test_wrapped_env_gives_the_raw_envs_episode():
    """The wrapped env reads the raw env directly after reset (a speed-up): same
    observations, rewards and ends, and the standard errors before reset."""
    wrapped, raw = env(**SMALL), raw_env(**SMALL)
    with pytest.raises(AttributeError, match="before reset"):
        wrapped.last()
    with pytest.raises(AttributeError, match="before reset"):
        _ = wrapped.agent_selection
    rng = np.random.default_rng(0)
    wrapped.reset(seed=5)
    raw.reset(seed=5)
    for agent in wrapped.agent_iter():
        assert agent == raw.agent_selection
        (obs, r, term, trunc, info), expected = wrapped.last(), raw.last()
        for key in obs:
            assert obs[key].tobytes() == expected[0][key].tobytes()
        assert (r, term, trunc, info) == expected[1:]
        assert wrapped.state().tobytes() == raw.state().tobytes()
        action = None if term or trunc else int(rng.choice(np.flatnonzero(obs["action_mask"])))
        wrapped.step(action)
        raw.step(action)
    assert raw.agents == [] and wrapped.agents == []


def test_pettingzoo_state_test_passes():
    state_test(env(**SMALL), parallel_env(**SMALL), num_cycles=100)
    e = raw_env(**SMALL)
    assert e.state_space is e.engine.observation_space["state"]


def test_module_and_factory_are_both_reachable():
    """``mara_env.env`` is the factory; the module it lives in is ``mara_env.cluster_env``."""
    import pydoc

    import mara_env.cluster_env

    assert "Compute-cluster scheduling" in pydoc.render_doc(mara_env.cluster_env.raw_env)
    assert mara_env.env is mara_env.cluster_env.env
    e = mara_env.env(**SMALL)
    e.reset(seed=0)
    assert e.agent_selection == "node_0"


def test_parallel_collision_is_idle_and_reported():
    p = parallel_env(**{**SMALL, "num_nodes": 8, "cap_choices": [1]})
    obs, _ = p.reset(seed=0)
    for _ in range(50):
        first = obs[p.agents[0]]
        valid = np.flatnonzero(first["action_mask"][:-1])
        if len(valid):
            actions = dict.fromkeys(p.agents, int(valid[0]))  # all want one cap-1 task
            obs, _, _, _, infos = p.step(actions)
            assert "masked_action" not in infos["node_0"]
            assert all(infos[a]["masked_action"] == valid[0] for a in p.possible_agents[1:])
            return
        obs, *_ = p.step({a: len(first["action_mask"]) - 1 for a in p.agents})
    pytest.fail("no task appeared")


def test_render_ansi_shows_cluster_and_queue():
    e = raw_env(**SMALL, render_mode="ansi")
    e.reset(seed=2)
    for _ in range(3 * SMALL["num_nodes"]):
        obs, *_ = e.last()
        valid = np.flatnonzero(obs["action_mask"])
        e.step(int(valid[0]))
    text = e.render()
    assert text.startswith("tick 3")
    assert "nodes: [" in text and "loss/target" in text


def test_same_seed_same_episode():
    def rollout(seed):
        e = raw_env(**SMALL)
        e.reset(seed=seed)
        rng = np.random.default_rng(0)
        out = []
        for agent in e.agent_iter():
            obs, r, term, trunc, _ = e.last()
            out.append((agent, obs["observation"].tobytes(), r))
            if term or trunc:
                e.step(None)
            else:
                e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        return out, e.unwrapped.engine.sim.metrics()

    assert rollout(7) == rollout(7)
    assert rollout(7)[1] != rollout(8)[1] or rollout(7)[0] != rollout(8)[0]


def test_unknown_config_key_is_rejected_by_name():
    with pytest.raises(mara_env.ConfigError, match=r"unknown key\(s\) \['nodes'\]"):
        raw_env(nodes=4)
    with pytest.raises(mara_env.ConfigError, match="num_nodes=0"):
        raw_env(num_nodes=0)


def test_mara_env_imports_neither_torch_nor_ray():
    import subprocess
    import sys

    code = (
        "import sys, mara_env, mara_env.schedulers, mara_env.cluster_env; "
        "bad = [m for m in ('torch', 'ray') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_play_random_is_a_seeded_random_policy_through_the_api() -> None:
    """play_random plays a whole episode with valid actions only (the env's own checks
    would raise), the same for the same seed, and far below uniform share."""
    from mara_env.cluster_env import play_random, raw_env
    from mara_env.schedulers import SCHEDULERS, run_episode

    def once(seed: int) -> dict:
        e = raw_env(num_nodes=6, num_slots=12, horizon=30, split="val", load=2.0)
        play_random(e, seed)
        assert e.engine.finished
        return e.engine.sim.metrics()

    first = once(3)
    assert first == once(3) and first != once(4)
    e = raw_env(num_nodes=6, num_slots=12, horizon=30, split="val", load=2.0)
    uniform = run_episode(SCHEDULERS["uniform"](), e.engine.config, e.engine.sim.traces, 3)
    assert first["completion_rate"] < uniform["completion_rate"]
