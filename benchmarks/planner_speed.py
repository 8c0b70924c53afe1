"""CPU milliseconds per tick of the hedge planner (``mara_agents.baselines.hedge``).

How to run:   python benchmarks/planner_speed.py [--nodes 16,64] [--loads 1.0,2.0]
                  [--episodes 2] [--lookahead-episodes 1] [--split val] [--urgency 1]
Runs the harness's episodes (base seed 0, synthetic) of ``hedge:predictor=task`` (the
calibrated remaining-work model, which reads the flow model and the deadline prior too:
what hedge's default ``predictor=cluster`` plans on for synthetic episodes),
``hedge:predictor=task-no-flow`` (the same without the flow model),
``hedge:predictor=flow+deadline`` (flow predictions fused with the deadline prior, the
default before the calibrated model: each task model's cost is printed against it),
``hedge:predictor=flow`` (flow alone) and ``hedge:predictor=exact`` (exact work), each
with hedge's ``urgency`` knob at ``--urgency``, in this process, one after the other, and
times each tick by this process's CPU clock in two parts: the predictions (the flow
model's ``PredictionCache`` refresh, cached until a task's reports grow by 10 %, and the
task model's features and network, or the fusion with the prior) and the planning on them
(exploration, chances of finishing, admission, this tick's counts). Prints per cluster
size and load the mean, median and 99th percentile of the planning cost per tick, the mean
prediction cost per tick, the active tasks per tick and the completion rate (a short
untimed episode first loads the compiled functions).
Then, on the same episodes, the shipped policy (``mara``, as the harness runs it): its whole
decision per tick (``act_round``: its features, which hold the calibrated model's
predictions and hedge's count, then the network) and the network alone (the greedy decoder
re-run on the recorded observations), against hedge's predictions plus planning.
Then the lookahead teacher (``lookahead``, its default knobs) on the first
``--lookahead-episodes`` of those episodes: its whole decision per tick (hedge's
predictions, plan, candidates and rollouts) against hedge's predictions plus planning, and
its CPU seconds per episode.
Each episode runs on one thread, as the harness plays it (``run_spec``); the untimed
episodes first load torch, so that it too is held to one thread.
Goal: planning at most 5 ms per tick on 16 nodes.  CPU-clock figures: steadier than wall
time on a shared machine, still higher while other jobs run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mara_agents.baselines.hedge import TASK_MODELS, Hedge
from mara_agents.baselines.lookahead import Lookahead
from mara_agents.evaluation.runner import build, episode_seed
from mara_agents.planning.hedge_rule import DEFAULTS
from mara_agents.planning.history import ClusterHistory
from mara_env.cluster import ClusterSim
from mara_env.cluster_env import raw_env
from mara_env.config import ClusterConfig
from mara_env.round_env import RoundEnv
from mara_env.schedulers import Scheduler, edf_order, place
from mara_env.threads import single_threaded
from mara_env.traces import load_traces

# the predictions timed, the calibrated model first (what the default reads on synthetic
# episodes); the calibrated models are compared with the fused distribution, the default
# before them
PREDICTORS = ("task", "task-no-flow", "flow+deadline", "flow", "exact")
BEFORE = "flow+deadline"


def timed_episode(
    hedge: Hedge, config: ClusterConfig, traces, seed: int
) -> tuple[list[float], list[float], list[int], float]:
    """One episode: per tick the CPU seconds of predicting and of planning, the active
    tasks; and the completion rate."""
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(seed))
    hedge.reset(sim, np.random.default_rng([seed, 1]))
    clock = time.process_time
    predict, plan, active = [], [], []
    with single_threaded():
        while not sim.done:
            t0 = clock()
            order = edf_order(sim)
            rw = hedge.predictions(sim, order)
            t1 = clock()
            counts, _ = hedge.plan(sim, order, rw)
            t2 = clock()
            predict.append(t1 - t0)
            plan.append(t2 - t1)
            active.append(len(order))
            sim.tick(place(sim, counts))
    return predict, plan, active, sim.metrics()["completion_rate"]


def decision_episode(
    scheduler: Scheduler, config: ClusterConfig, traces, seed: int
) -> tuple[list[float], float]:
    """One episode of ``scheduler``: per tick the CPU seconds of its whole decision; and
    the completion rate."""
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(seed))
    scheduler.reset(sim, np.random.default_rng([seed, 1]))
    clock = time.process_time
    decide = []
    with single_threaded():
        while not sim.done:
            t0 = clock()
            counts = scheduler.allocate(sim)
            decide.append(clock() - t0)
            sim.tick(place(sim, counts))
    return decide, sim.metrics()["completion_rate"]


def policy_episode(agent, config: ClusterConfig, traces, seed: int) -> tuple[list[float], float]:
    """One episode of the shipped policy: per tick the CPU seconds of its whole decision;
    and the CPU seconds per tick of its network alone, re-run on the recorded observations."""
    config = config.replace(num_slots=agent.slots_for(config.num_nodes))
    env = raw_env(config=config, trace_set=traces)
    env.reset(seed=seed)
    agent.reset(env, seed)
    rounds = RoundEnv(env)
    clock = time.process_time
    decide, observed = [], []
    with single_threaded():
        while not rounds.engine.finished:
            t0 = clock()
            actions = agent.act_round(env)
            decide.append(clock() - t0)
            observed.append(agent._rounds.observe())
            rounds.play(actions)
        t0 = clock()
        for obs in observed:
            agent.policy.act_round(obs)
    return decide, (clock() - t0) / max(1, len(observed))


def main() -> None:
    """Parse the arguments and print one line per cluster size, load and predictor."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", default="16,64", help="cluster sizes (default 16,64)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--episodes", type=int, default=2, help="episodes per point (default 2)")
    p.add_argument(
        "--lookahead-episodes",
        type=int,
        default=1,
        help="episodes per point of the lookahead teacher (default 1; 0: none)",
    )
    p.add_argument("--split", default="val", help="trace split (default val)")
    p.add_argument(
        "--urgency",
        type=float,
        default=DEFAULTS.urgency,
        help=f"hedge's urgency knob, in [0, 1] (default {DEFAULTS.urgency:g}, hedge's; its "
        f"wait is hedge's, {DEFAULTS.wait} ticks)",
    )
    args = p.parse_args()
    if not 0 <= args.urgency <= 1:
        p.error(f"--urgency {args.urgency}: expected a weight in [0, 1]")
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    if not 0 <= args.lookahead_episodes <= args.episodes:
        p.error("--lookahead-episodes must be in [0, --episodes]")
    traces = load_traces(split=args.split)
    # the first ticks of a process load numba's compiled functions: an untimed short episode
    short = ClusterConfig(split=args.split, num_nodes=8, horizon=10)
    for predictor in PREDICTORS:
        timed_episode(Hedge(predictor=predictor), short, traces, 0)
    agent = build("mara=")
    policy_episode(agent, short, traces, 0)
    decision_episode(Lookahead(), short, traces, 0)
    print(
        f"{args.episodes} {args.split} episodes per point, CPU ms per tick, one process; "
        f"hedge's urgency {args.urgency:g}:"
    )
    for nodes in (int(v) for v in args.nodes.split(",")):
        for load in (float(v) for v in args.loads.split(",")):
            config = ClusterConfig(split=args.split, num_nodes=nodes, load=load)
            totals: dict[str, float] = {}  # predictions + planning, ms per tick
            for predictor in PREDICTORS:
                hedge = Hedge(predictor=predictor, urgency=args.urgency)
                predict, plan, active, rates = [], [], [], []
                for i in range(args.episodes):
                    pr, pl, ac, rate = timed_episode(
                        hedge, config, traces, episode_seed(0, load, i)
                    )
                    predict += pr
                    plan += pl
                    active += ac
                    rates.append(rate)
                ms = 1e3 * np.asarray(plan)
                print(
                    f"  {nodes:3d} nodes, load {load:g}, {predictor:13s}: planning mean "
                    f"{ms.mean():.2f}, median {np.median(ms):.2f}, p99 "
                    f"{np.percentile(ms, 99):.2f} ms; predictions mean "
                    f"{1e3 * np.mean(predict):.2f} ms; {np.mean(active):.1f} active tasks; "
                    f"completion {np.mean(rates):.3f} ({len(ms)} ticks)",
                    flush=True,
                )
                totals[predictor] = ms.mean() + 1e3 * np.mean(predict)
            for predictor in sorted(TASK_MODELS):
                print(
                    f"    predictions + planning, {predictor} / {BEFORE}: "
                    f"{totals[predictor] / totals[BEFORE]:.2f}"
                )
            hedge_ms = totals[ClusterHistory.of(config).distribution()]  # the default's
            decide, network = [], []
            for i in range(args.episodes):
                d, n = policy_episode(agent, config, traces, episode_seed(0, load, i))
                decide += d
                network.append(n)
            ms = 1e3 * np.asarray(decide)
            print(
                f"  {nodes:3d} nodes, load {load:g}, {'mara':13s}: decision mean {ms.mean():.2f}, "
                f"median {np.median(ms):.2f} ms, of which network {1e3 * np.mean(network):.2f} "
                f"ms; hedge's predictions + planning {hedge_ms:.2f} ms "
                f"(mara / hedge {ms.mean() / hedge_ms:.1f})",
                flush=True,
            )
            if not args.lookahead_episodes:
                continue
            teacher = Lookahead()
            decide, rates = [], []
            for i in range(args.lookahead_episodes):
                d, rate = decision_episode(teacher, config, traces, episode_seed(0, load, i))
                decide += d
                rates.append(rate)
            ms = 1e3 * np.asarray(decide)
            print(
                f"  {nodes:3d} nodes, load {load:g}, {'lookahead':13s}: decision mean "
                f"{ms.mean():.1f}, median {np.median(ms):.1f}, p99 {np.percentile(ms, 99):.1f} ms "
                f"(lookahead / hedge {ms.mean() / hedge_ms:.0f}); "
                f"{ms.sum() / 1e3 / args.lookahead_episodes:.1f} s per episode; completion "
                f"{np.mean(rates):.3f} ({len(ms)} ticks)",
                flush=True,
            )


if __name__ == "__main__":
    main()
