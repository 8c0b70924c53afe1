"""ClusterSim.tick's rules on a hand-built workload: warm-up, gain r·n^α, completion only
by the deadline, expiry (and arrival), each tick worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.cluster import ACTIVE, DONE, EXPIRED, PENDING, ClusterSim, InvalidAssignment
from mara_env.config import ClusterConfig
from mara_env.traces import TraceSet, load_traces
from mara_env.workload import Workload

# One trace: the loss reported at work w is the loss of the last logged step <= w.
STEPS = np.arange(1.0, 9.0)  # 1, 2, ..., 8
LOSS = np.array([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
IDLE = -1


def traces(loss: np.ndarray = LOSS, smooth: np.ndarray = LOSS) -> TraceSet:
    return TraceSet(
        ids=np.array(["t"]),
        families=np.array(["f"]),
        sources=np.array(["s"]),
        splits=np.array(["train"]),
        offsets=np.array([0, len(STEPS)]),
        steps=STEPS,
        loss=loss,
        smooth=smooth.copy(),
    )


def workload(**columns: list) -> Workload:
    """Tasks on the one trace, all reaching target 0.6 at work 5 unless given otherwise."""
    n = len(columns["deadline"])
    given = {k: np.asarray(v) for k, v in columns.items()}
    base = {
        "arrival": np.zeros(n, np.int64),
        "target": np.full(n, 0.6),
        "trace": np.zeros(n, np.int64),
        "cap": np.full(n, 4, np.int64),
        "alpha": np.ones(n),
        "rate": np.ones(n),
        "size": np.full(n, 5.0),
        "work_sampled": np.full(n, 5.0),
        "work_true": np.full(n, 5.0),
    }
    return Workload(**{**base, **given})


def sim_of(wl: Workload, nodes: int = 4) -> ClusterSim:
    sim = ClusterSim(ClusterConfig(num_nodes=nodes, num_slots=4, horizon=8), traces())
    sim.reset(np.random.default_rng(0), workload=wl)
    return sim


def test_a_node_does_no_work_in_its_first_tick_on_a_task():
    sim = sim_of(workload(deadline=[20]))
    first = sim.tick(np.array([0, 0, IDLE, IDLE]))
    assert sim.work[0] == 0.0 and len(first.reported) == 0 and sim.hist_work[0] == []
    assert sim.stats.warmup_node_ticks == 2 and sim.nodes_now[0] == 2
    sim.tick(np.array([0, 0, IDLE, IDLE]))  # both stay: warm, 1 * 2**1
    assert sim.work[0] == 2.0 and sim.hist_work[0] == [2.0] and sim.reported[0] == 0.9
    sim.tick(np.array([0, 0, 0, IDLE]))  # a third node joins: only the two warm ones work
    assert sim.work[0] == 4.0 and sim.stats.warmup_node_ticks == 3
    sim.tick(np.array([IDLE, 0, 0, 0]))  # node 0 leaves, node 3 joins: two warm
    assert sim.work[0] == 6.0 and sim.stats.reassignments == 4


def test_without_reassign_cost_every_node_works_at_once():
    sim = ClusterSim(ClusterConfig(num_nodes=4, num_slots=4, reassign_cost=False), traces())
    sim.reset(np.random.default_rng(0), workload=workload(deadline=[20]))
    sim.tick(np.array([0, 0, IDLE, IDLE]))
    assert sim.work[0] == 2.0 and sim.stats.warmup_node_ticks == 0


def test_a_fractional_reassign_cost_takes_that_share_of_a_joining_nodes_first_tick():
    sim = ClusterSim(ClusterConfig(num_nodes=4, num_slots=4, reassign_cost=0.25), traces())
    sim.reset(np.random.default_rng(0), workload=workload(deadline=[20], alpha=[0.5]))
    sim.tick(np.array([0, 0, IDLE, IDLE]))  # two joining nodes: 1.5 nodes' work
    assert sim.work[0] == pytest.approx(1.5**0.5) and sim.stats.warmup_node_ticks == 2
    sim.tick(np.array([0, 0, 0, IDLE]))  # two warm, one joining: 2.75 nodes
    assert sim.work[0] == pytest.approx(1.5**0.5 + 2.75**0.5)
    assert sim.warmup_used[0] == 3 and sim.stats.reassignments == 3
    with pytest.raises(ValueError, match="reassign_cost"):
        ClusterConfig(reassign_cost=1.5)


@pytest.mark.parametrize(("rate", "alpha"), [(1.0, 1.0), (0.7, 0.5), (1.3, 0.8)])
@pytest.mark.parametrize("nodes", [1, 2, 3, 4])
def test_warm_nodes_gain_rate_times_nodes_to_the_alpha(rate, alpha, nodes):
    sim = sim_of(workload(deadline=[20], rate=[rate], alpha=[alpha], target=[0.0]))
    assign = np.array([0] * nodes + [IDLE] * (4 - nodes))
    sim.tick(assign)  # warm-up
    for tick in (1, 2):
        sim.tick(assign)
        assert sim.work[0] == pytest.approx(tick * rate * nodes**alpha, rel=1e-12)
    assert sim.node_ticks_used[0] == 3 * nodes


def test_a_task_completes_only_by_its_deadline_and_expires_at_it():
    """Tasks 0 and 1 progress alike (2 warm nodes each: work 2, 4, 6 after ticks 2, 3, 4)
    and reach the target (work 5) in tick 4; task 0's deadline is 4, task 1's is 3."""
    sim = sim_of(workload(deadline=[4, 3]))
    both = np.array([0, 0, 1, 1])
    for t in (1, 2):
        result = sim.tick(both)
        assert len(result.completed) == len(result.expired) == 0, t
    result = sim.tick(both)  # t = 3 = task 1's deadline, work 4: not reached
    assert result.expired.tolist() == [1] and result.completed.tolist() == []
    assert sim.status.tolist() == [ACTIVE, EXPIRED] and sim.finish_tick[1] == 3
    assert sim.node_task.tolist() == [0, 0, IDLE, IDLE] and sim.nodes_now[1] == 0
    with pytest.raises(InvalidAssignment, match="task 1 is not active at tick 3"):
        sim.tick(both)
    result = sim.tick(np.array([0, 0, IDLE, IDLE]))  # t = 4 = task 0's deadline, work 6
    assert result.completed.tolist() == [0] and sim.reported[0] == 0.5
    assert sim.status.tolist() == [DONE, EXPIRED] and sim.finish_tick[0] == 4
    assert sim.done
    metrics = sim.metrics()
    assert (metrics["completed"], metrics["expired"], metrics["ticks"]) == (1, 1, 4)
    assert metrics["expired_node_ticks"] == 6  # task 1's three ticks on two nodes, wasted


def test_reaching_the_target_after_the_deadline_is_too_late():
    """Alone and unserved until tick 2, the task would reach work 5 in tick 5; its deadline
    is 4, so it expires at 4 with the target unreached and never completes."""
    sim = sim_of(workload(deadline=[4]))
    sim.tick(np.full(4, IDLE))
    for _ in range(3):
        result = sim.tick(np.array([0, 0, IDLE, IDLE]))
    assert sim.t == 4 and sim.work[0] == 4.0
    assert result.expired.tolist() == [0] and sim.status[0] == EXPIRED
    assert sim.metrics()["completed"] == 0


def test_tasks_arrive_at_their_tick():
    sim = sim_of(workload(deadline=[10, 10], arrival=[0, 2]))
    assert sim.status.tolist() == [ACTIVE, PENDING]
    with pytest.raises(InvalidAssignment, match="task 1 is not active at tick 0"):
        sim.tick(np.array([1, IDLE, IDLE, IDLE]))
    assert sim.tick(np.full(4, IDLE)).arrived.tolist() == []
    assert sim.tick(np.full(4, IDLE)).arrived.tolist() == [1]
    assert sim.status.tolist() == [ACTIVE, ACTIVE]


# A trace whose loss is noisy around the target 0.6: the first point at or below it is at
# step 3 (W_k = 3); the points after it go back above it at steps 4 and 6.
NOISY = np.array([1.0, 0.8, 0.55, 0.7, 0.5, 0.65, 0.45, 0.6])


def noisy_sim(deadline: int = 20, nodes: int = 4) -> ClusterSim:
    tr = traces(NOISY)
    sim = ClusterSim(ClusterConfig(num_nodes=nodes, num_slots=4, horizon=8), tr)
    sim.reset(np.random.default_rng(0), workload=workload(deadline=[deadline], work_true=[3.0]))
    return sim


def test_the_true_work_is_the_first_logged_point_at_or_below_the_target():
    """sample_workload's W_k on the noisy trace (targets drawn from a smooth curve): the
    first raw point <= the drawn target, which may come before the smooth curve gets there."""
    tr = traces(NOISY, smooth=LOSS)
    cfg = ClusterConfig(num_nodes=4, num_slots=4, horizon=200, load=2.0)
    sim = ClusterSim(cfg, tr)
    sim.reset(np.random.default_rng(3))
    wl = sim.truth
    assert len(wl) > 20 and (wl.work_true < wl.work_sampled).any()
    for eps, w in zip(wl.target, wl.work_true):
        hits = STEPS[NOISY <= eps]
        if not len(hits):  # the raw curve never gets there: no schedule completes it
            assert w == np.inf, (eps, w)
        else:
            assert w == (hits[0] if hits[0] > STEPS[0] else 0.0), (eps, w)


def test_a_task_completes_when_its_work_passes_the_first_point_below_its_target():
    """Four warm nodes take the task from work 0 past step 3 to work 4 in one tick; the
    tick ends on step 4 (loss 0.7, above the target), yet the job evaluated at step 3
    (0.55) and stopped: the task completes, and it reports the loss at its work."""
    sim = noisy_sim()
    four = np.zeros(4, np.int64)
    sim.tick(four)  # warm-up: no work
    assert sim.remaining_true(np.array([0])).tolist() == [3.0]
    result = sim.tick(four)
    assert sim.work[0] == 4.0 and sim.reported[0] == 0.7
    assert result.completed.tolist() == [0] and sim.status[0] == DONE


def test_remaining_true_is_the_work_to_completion_on_a_noisy_trace():
    """One node: work 1, 2 (remaining 2, 1), then work 3 completes the task."""
    sim = noisy_sim()
    one = np.array([0, IDLE, IDLE, IDLE])
    sim.tick(one)
    remaining = []
    for _ in range(3):
        remaining.append(float(sim.remaining_true(np.array([0]))[0]))
        result = sim.tick(one)
    assert remaining == [3.0, 2.0, 1.0]
    assert result.completed.tolist() == [0] and sim.finish_tick[0] == 4


def test_completion_needs_the_work_and_the_deadline():
    """Two nodes: work 2 after tick 2, 4 after tick 3; with deadline 2 the task expires at
    work 2 < W_k (its reported loss 0.8 is above the target anyway)."""
    sim = noisy_sim(deadline=2)
    two = np.array([0, 0, IDLE, IDLE])
    sim.tick(two)
    result = sim.tick(two)
    assert result.expired.tolist() == [0] and sim.metrics()["completed"] == 0


def test_throughput_noise_has_mean_one_and_the_given_spread():
    traces = load_traces(split="val")
    config = ClusterConfig(split="val", throughput_noise=0.2, reassign_cost=False, horizon=60)
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(0))
    ratios = []
    while not sim.done:
        act = sim.active()[: config.num_nodes]
        assign = np.full(config.num_nodes, -1)
        assign[: len(act)] = act  # one node each: a tick gains rate * 1**alpha
        before = sim.work[act].copy()
        sim.tick(assign)
        ratios += list((sim.work[act] - before) / sim.truth.rate[act])
    ratios = np.array(ratios)
    assert len(ratios) > 300
    assert abs(ratios.mean() - 1) < 0.03 and abs(ratios.std() - 0.2) < 0.03
