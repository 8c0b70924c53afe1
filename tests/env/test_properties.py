"""Property tests: simulator invariants over random configs and random episodes."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mara_env.cluster import ACTIVE, DONE, EXPIRED, ClusterSim
from mara_env.cluster_env import parallel_env, raw_env
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces
from mara_env.workload import sample_workload
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


def _reference_state(e, i: int, chosen: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(state, mask) of node ``i`` recomputed from the simulator by each feature's definition
    in the env's docstring; ``chosen``: task -> nodes that chose it earlier in this round."""
    from mara_env.cluster_env import (
        CAP_SCALE,
        LOG_RATIO_LIMIT,
        NODE_FEATURES,
        OBS_LIMIT,
        QUEUE_FEATURES,
        SLOT_FEATURES,
        TICK_SCALE,
    )
    from mara_env.traces import LOSS_FLOOR

    cfg, sim = e.config, e.engine.sim
    wl, t, n, k = sim.workload, sim.t, cfg.num_nodes, cfg.num_slots
    active = sorted(
        np.flatnonzero(sim.status == ACTIVE), key=lambda j: (wl.deadline[j], wl.arrival[j], j)
    )
    slots, queued = active[:k], active[k:]
    mine = sim.node_task[i]
    node = {
        "has_task": mine >= 0,
        "task_visible": mine >= 0 and mine in slots,
        "agent_position": i / n,
        "nodes_after": (n - 1 - i) / n,
        "utilisation": np.mean(sim.node_task >= 0),
        "active_tasks": len(active) / k,
        "queued_tasks": len(queued) / k,
        "time": t / cfg.horizon,
    }
    rows = np.zeros((k, len(SLOT_FEATURES)))
    mask = np.zeros(k + 1, np.int8)
    mask[k] = 1
    for s, j in enumerate(slots):
        cap = wl.cap[j]
        ref_rate = wl.rate[j] * min(cap, cfg.ref_nodes) ** wl.alpha[j]
        log_ratio = np.log(max(sim.reported[j], LOSS_FLOOR)) - np.log(max(wl.target[j], LOSS_FLOOR))
        row = {
            "occupied": 1.0,
            "log_loss_ratio": np.clip(log_ratio, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT),
            "slope": sim.slope[j],
            "progress": sim.progress(np.array([j]))[0],
            "service": sim.work[j] / ref_rate / TICK_SCALE,
            "time_left": (wl.deadline[j] - t) / TICK_SCALE,
            "age": (t - wl.arrival[j]) / TICK_SCALE,
            "nodes_now": sim.nodes_now[j] / cap,
            "nodes_chosen": chosen.get(j, 0) / cap,
            "nodes_pending": np.sum(sim.node_task[i:] == j) / cap,
            "cap": cap / CAP_SCALE,
            "alpha": wl.alpha[j],
            "is_mine": float(mine == j),
        }
        rows[s] = [row[f] for f in SLOT_FEATURES]
        mask[s] = chosen.get(j, 0) < cap
    queue = dict.fromkeys(QUEUE_FEATURES, 0.0)
    if queued:
        q = np.array(queued)
        queue = {
            "queue_count": len(q) / k,
            "queue_time_left": np.mean(wl.deadline[q] - t) / TICK_SCALE,
            "queue_progress": np.mean(sim.progress(q)),
            "queue_cap": np.mean(wl.cap[q]) / CAP_SCALE,
        }
    state = np.concatenate(
        [[node[f] for f in NODE_FEATURES], rows.ravel(), [queue[f] for f in QUEUE_FEATURES]]
    )
    return np.clip(state, -OBS_LIMIT, OBS_LIMIT).astype(np.float32), mask


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, seed=st.integers(0, 2**31 - 1), p_invalid=st.floats(0, 0.5))
def test_every_feature_matches_its_definition(cfg, seed, p_invalid):
    """The env computes features once a round and updates them as nodes choose; every
    observation equals the features recomputed from the simulator by their definitions."""
    e = raw_env(**{**SMALL, **cfg})
    e.reset(seed=seed)
    rng = np.random.default_rng(seed)
    chosen: dict[int, int] = {}
    t = e.engine.sim.t
    for agent in e.agent_iter(600):
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            e.step(None)
            continue
        if e.engine.sim.t != t:
            chosen, t = {}, e.engine.sim.t
        i = e.possible_agents.index(agent)
        state, mask = _reference_state(e, i, chosen)
        np.testing.assert_allclose(obs["state"], state, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(obs["observation"], obs["state"][: len(obs["observation"])])
        np.testing.assert_array_equal(obs["action_mask"], mask)
        np.testing.assert_array_equal(e.state(), obs["state"])
        if rng.random() < p_invalid:
            action = int(rng.integers(len(mask)))
        else:
            action = int(rng.choice(np.flatnonzero(mask)))
        slot_task = e.engine.slot_tasks[action] if action < len(mask) - 1 else -1
        e.step(action)
        if slot_task >= 0 and "masked_action" not in e.infos[agent]:
            chosen[slot_task] = chosen.get(slot_task, 0) + 1


def _fixed_counts_episode(split: str, seed: int, counts_of, reassign_cost) -> ClusterSim:
    """One episode in which every task holds ``counts_of(workload)[k]`` nodes from its
    arrival to its end, on a cluster with a block of nodes for every task (no node moves)."""
    traces = load_traces(split=split)
    cfg = ClusterConfig(num_nodes=1, horizon=40, load=1.0, reassign_cost=reassign_cost)
    wl = sample_workload(cfg, traces, np.random.default_rng(seed))
    counts = np.asarray(counts_of(wl), np.int64)
    sim = ClusterSim(dataclasses.replace(cfg, num_nodes=max(int(counts.sum()), 1)), traces)
    sim.reset(np.random.default_rng(seed), workload=wl)
    owner = np.repeat(np.arange(len(wl)), counts)
    while not sim.done:
        assign = np.where(sim.status[owner] == ACTIVE, owner, -1)
        result = sim.tick(assign)
        # Completion never comes before the task's work reaches W_k.
        assert (sim.work[result.completed] >= wl.work_true[result.completed]).all()
    return sim


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    split=st.sampled_from(["train", "val", "test"]),
    seed=st.integers(0, 2**31 - 1),
    reassign_cost=st.sampled_from([True, 0.5, False]),
)
def test_more_nodes_never_complete_a_task_later(split, seed, reassign_cost):
    """Under fixed allocations, a task on its cap completes no later than on one node, and
    every task that completes on one node completes on its cap."""
    one = _fixed_counts_episode(split, seed, lambda wl: np.ones(len(wl)), reassign_cost)
    cap = _fixed_counts_episode(split, seed, lambda wl: wl.cap, reassign_cost)
    done_one, done_cap = one.status == DONE, cap.status == DONE
    assert not (done_one & ~done_cap).any()
    assert (cap.finish_tick[done_one] <= one.finish_tick[done_one]).all()
