"""The shipped policy on clusters of other sizes: its slot count, what it sees, the warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mara_agents.evaluation.registry import make_scheduler
from mara_agents.evaluation.runner import evaluate
from mara_agents.policy.agent import MaraAgent, size_note
from mara_agents.policy.inference import load_policy, slots_for
from mara_env.cluster_env import raw_env
from mara_env.config import ClusterConfig
from mara_env.round_env import RoundEnv
from tests.conftest import TRACES


@pytest.fixture(scope="module")
def shipped():
    return load_policy()


def test_slots_grow_with_the_cluster_at_the_trained_ratio(shipped) -> None:
    """64 slots up to the trained 16 nodes, then 4 per node (the trained ratio)."""
    assert (shipped.net.layout.num_slots, shipped.trained_nodes) == (64, 16)
    got = [shipped.slots_for(n) for n in (1, 8, 16, 17, 64, 256, 512)]
    assert got == [64, 64, 64, 68, 256, 1024, 2048]
    assert slots_for(8, 4, 10) == 20 and slots_for(8, 4, 3) == 8


def _served_but_hidden(scheduler: str, nodes: int, slots: int) -> tuple[int, int]:
    """Follow ``scheduler``'s schedule through the env with ``slots`` slots on a heavy load;
    returns the (task, tick) pairs it gives a node while the task is in no visible slot,
    and the most active tasks hidden beyond the slots at a tick."""
    config = ClusterConfig(
        num_nodes=nodes, num_slots=slots, load=16.0, horizon=40, traces=TRACES, split="train"
    )
    env = raw_env(config=config)
    env.reset(seed=0)
    rounds, engine = RoundEnv(env), env.engine
    sched = make_scheduler(scheduler)
    sched.reset(engine.sim, np.random.default_rng([0, 1]))
    hidden = most_queued = 0
    while not engine.finished:
        assign = sched.assign(engine.sim)
        slot = {t: s for s, t in enumerate(engine.slot_tasks.tolist()) if t >= 0}
        hidden += len(set(assign[assign >= 0].tolist()) - slot.keys())
        most_queued = max(most_queued, len(engine.queued))
        rounds.play([slot.get(t, slots) for t in assign.tolist()])
    return hidden, most_queued


@pytest.mark.parametrize("nodes", [64, 256])
@pytest.mark.parametrize("scheduler", ["uniform", "flow_share"])
def test_every_task_a_baseline_serves_is_visible_to_the_policy(
    shipped, scheduler: str, nodes: int
) -> None:
    """On a load heavy enough that tasks are hidden beyond the slots, every task uniform
    share or flow_share gives a node in a round is in one of the slots the policy sees."""
    hidden, most_queued = _served_but_hidden(scheduler, nodes, shipped.slots_for(nodes))
    assert most_queued > 0  # some tasks were beyond the slots: the check is not empty
    assert hidden == 0


def test_the_trained_slot_count_hides_served_tasks_on_a_big_cluster(shipped) -> None:
    """What the growing slots fix: 64 slots on 256 nodes hide tasks uniform share serves."""
    hidden, _ = _served_but_hidden("uniform", 256, shipped.net.layout.num_slots)
    assert hidden > 0


def test_the_agent_acts_with_the_trained_weights_on_more_slots(shipped) -> None:
    """At N = 40 the agent acts on 160 slots with the shipped weights: each node's action
    is the argmax of the network's logits (built for 160 slots from the same weights) given
    the earlier nodes' actions."""
    from mara_agents.policy.rounds import teacher_forced_logits

    agent = MaraAgent(shipped)
    k = agent.slots_for(40)
    env = raw_env(num_nodes=40, num_slots=k, horizon=12, load=2.0, traces=TRACES, split="val")
    env.reset(seed=2)
    agent.reset(env, seed=2)
    net = agent.policy.net
    assert net.layout.num_slots == k and agent.slots_for(16) == 64
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), shipped.net.parameters()))
    driver = RoundEnv(env)
    checked = 0
    while not env.engine.finished:
        obs = agent._rounds.observe()
        batch = {key: torch.from_numpy(np.asarray(v))[None] for key, v in obs.items()}
        got = agent.act_round(env)
        with torch.inference_mode():
            forced = teacher_forced_logits(net, batch, torch.from_numpy(got)[None])
        assert np.array_equal(forced.argmax(-1)[0].numpy(), got)
        driver.play(got)
        checked += 1
    assert checked >= 12
    small = raw_env(num_nodes=16, num_slots=64, horizon=5, traces=TRACES, split="val")
    small.reset(seed=0)
    agent.reset(small, seed=0)
    assert agent.policy is shipped  # back at the trained size: the trained policy itself


def test_a_policy_off_its_trained_size_says_so_once_and_results_do_not_depend_on_workers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """One line on stderr naming the trained N and K and the N asked for, at the start of
    the run and only there (not per worker or episode); results.csv is the same for 1 and
    2 workers; no line at the trained size."""
    config = ClusterConfig(num_nodes=24, horizon=8, traces=TRACES, split="val")
    args = (["mara", "uniform"], [1.0, 2.0], 2, [0], config)
    evaluate(*args, workers=1, out_dir=tmp_path / "w1", progress=False)
    evaluate(*args, workers=2, out_dir=tmp_path / "w2", progress=False)
    assert (tmp_path / "w1/results.csv").read_bytes() == (tmp_path / "w2/results.csv").read_bytes()
    lines = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(lines) == 2, lines  # one per run
    assert lines[0] == lines[1]
    assert lines[0].startswith("warning: mara: policy mara_v19.pt")
    assert "N=16 nodes with K=64 slots" in lines[0] and "N=24 nodes with K=96 slots" in lines[0]
    assert size_note("", config.replace(num_nodes=16)) is None
