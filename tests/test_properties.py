"""Property tests: simulator invariants over random configs and random episodes."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mara_env.cluster import ACTIVE, DONE, EXPIRED
from mara_env.cluster_env import parallel_env, raw_env
from tests.conftest import SMALL

configs = st.fixed_dictionaries(
    {
        "num_nodes": st.integers(1, 8),
        "num_slots": st.integers(1, 6),
        "load": st.floats(0.2, 3.0),
        "horizon": st.integers(1, 25),
        "reassign_cost": st.booleans(),
        "shaping": st.floats(0.0, 3.0),
        "cap_choices": st.lists(st.integers(1, 8), min_size=1, max_size=3),
    }
)


def _check_tick(sim, caps) -> None:
    # Each node serves at most one task (node_task is one index per node), nodes are
    # conserved and no task ever exceeds its parallelism cap.
    assert sim.node_task.shape == (sim.config.num_nodes,)
    assert sim.nodes_now.sum() <= sim.config.num_nodes
    assert (sim.nodes_now <= caps).all()
    assert (sim.status[sim.node_task[sim.node_task >= 0]] == ACTIVE).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, seed=st.integers(0, 2**31 - 1), p_invalid=st.floats(0, 0.5))
def test_aec_episode_invariants(cfg, seed, p_invalid):
    e = raw_env(**{**SMALL, **cfg})
    e.reset(seed=seed)
    sim = e.engine.sim
    rng = np.random.default_rng(seed)
    shaped = 0.0
    completions = 0
    finished_at: dict[int, int] = {}
    for agent in e.agent_iter():
        obs, reward, term, trunc, _ = e.last()
        if agent == e.possible_agents[0]:
            shaped += reward
        if term or trunc:
            e.step(None)
            continue
        if rng.random() < p_invalid:
            action = int(rng.integers(len(obs["action_mask"])))  # may be masked: idle
        else:
            action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
        t_before = sim.t
        done_before = set(np.flatnonzero(sim.status == DONE))
        e.step(action)
        if sim.t != t_before:
            _check_tick(sim, sim.workload.cap)
            new_done = set(np.flatnonzero(sim.status == DONE)) - done_before
            assert not (new_done & set(finished_at)), "a task completed twice"
            for k in new_done:
                finished_at[k] = sim.t
            completions += len(new_done)
    # the last round's reward reaches node_0 through its dead step's last()
    wl = sim.workload
    done = np.flatnonzero(sim.status == DONE)
    assert (sim.finish_tick[done] <= wl.deadline[done]).all()
    assert ((sim.status == DONE) | (sim.status == EXPIRED)).all()
    assert completions == len(done)
    assert abs(shaped - len(done)) < 1e-9


@settings(max_examples=25, deadline=None)
@given(cfg=configs, seed=st.integers(0, 2**31 - 1))
def test_parallel_shaped_return_equals_completions(cfg, seed):
    p = parallel_env(**{**SMALL, **cfg})
    obs, _ = p.reset(seed=seed)
    rng = np.random.default_rng(seed)
    total = 0.0
    while p.agents:
        actions = {a: int(rng.integers(len(obs[a]["action_mask"]))) for a in p.agents}
        obs, rewards, *_ = p.step(actions)
        total += rewards["node_0"]
    sim = p.engine.sim
    assert abs(total - int((sim.status == DONE).sum())) < 1e-9
    assert p.engine.invalid_counts.sum() >= 0
