"""How closely a cloned policy realises its teacher's allocation, round by round.

A clone of an allocating teacher (``hedge``, ``flow_share``) is judged per node decision
while it trains (the DAgger log's "agrees with"), but what decides completions is each
round's allocation: how many nodes each task gets.  This runs the policy greedily on the
harness's episodes (base seed 0) and, at the start of every round, asks the teacher what
it would allocate in the same state; it prints, per cluster size, workload and load, the
share of rounds in which the two allocations differ and the mean number of nodes placed
differently per round (half the sum over tasks of the count differences), with the busy
nodes of each and the policy's completion rate.

    python benchmarks/imitation_fidelity.py                                   # the shipped policy
    python benchmarks/imitation_fidelity.py --nodes 16,64 --jobs none,philly --loads 1.0,2.0
    python benchmarks/imitation_fidelity.py --policy runs/mara_hedge_jobs.pt --teacher hedge

Results to expect: docs/training.md ("Replayed days and 64 nodes").
"""

from __future__ import annotations

import argparse

import numpy as np

from mara_agents.evaluation.registry import make_scheduler
from mara_agents.evaluation.runner import build, episode_seed
from mara_env.cluster_env import raw_env
from mara_env.config import ClusterConfig
from mara_env.round_env import RoundEnv
from mara_env.schedulers import SchedulerAgent
from mara_env.traces import load_traces


def episode(agent, teacher: SchedulerAgent, config: ClusterConfig, traces, seed: int):
    """Per round: nodes placed differently, the teacher's and the policy's busy nodes;
    and the episode's completion rate."""
    config = config.replace(num_slots=agent.slots_for(config.num_nodes))
    env = raw_env(config=config, trace_set=traces)
    env.reset(seed=seed)
    agent.reset(env, seed)
    teacher.reset(env, seed)
    rounds = RoundEnv(env)
    k = config.num_slots
    rows = []
    while not rounds.engine.finished:
        wanted = teacher.act_round(env)
        taken = agent.act_round(env)
        a, b = (np.bincount(x, minlength=k + 1)[:k] for x in (wanted, taken))
        rows.append((np.abs(a - b).sum() / 2, a.sum(), b.sum()))
        rounds.play(taken)
    return np.array(rows).reshape(-1, 3), env.engine.sim.metrics()["completion_rate"]


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--policy", default="", help="policy file (default: the shipped policy)")
    p.add_argument("--teacher", default="hedge", help="scheduler spec of the teacher (hedge)")
    p.add_argument("--nodes", default="16,64", help="cluster sizes (default 16,64)")
    p.add_argument("--jobs", default="none,philly", help="workloads: none (synthetic), philly")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--episodes", type=int, default=3, help="episodes per point (default 3)")
    p.add_argument("--split", default="val", help="trace split (default val)")
    args = p.parse_args()
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    agent = build(f"mara={args.policy}")
    teacher = SchedulerAgent(make_scheduler(args.teacher))
    traces = load_traces(split=args.split)
    print(f"{args.episodes} {args.split} episodes per point; policy against {args.teacher}:")
    for nodes in (int(v) for v in args.nodes.split(",")):
        for jobs in args.jobs.split(","):
            for load in (float(v) for v in args.loads.split(",")):
                config = ClusterConfig(
                    split=args.split,
                    num_nodes=nodes,
                    load=load,
                    jobs=None if jobs == "none" else jobs,
                )
                rows, rates = [], []
                for i in range(args.episodes):
                    r, rate = episode(agent, teacher, config, traces, episode_seed(0, load, i))
                    rows.append(r)
                    rates.append(rate)
                r = np.concatenate(rows)
                print(
                    f"  {nodes:3d} nodes, {jobs:6s}, load {load:g}: allocations differ in "
                    f"{np.mean(r[:, 0] > 0):.0%} of {len(r)} rounds, {r[:, 0].mean():.2f} nodes "
                    f"placed differently per round (busy: teacher {r[:, 1].mean():.1f}, policy "
                    f"{r[:, 2].mean():.1f}); policy completion {np.mean(rates):.3f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
