"""Episodes per second of the evaluation harness (load 1.0, 16 nodes), and the policy's cost.

How to run:   python benchmarks/eval_speed.py [--episodes 20] [--workers 1]
                  [--specs lara,edf,flow_share,mara] [--traces FILE]
Runs ``mara_agents.evaluation.runner.evaluate`` without writing outputs and prints episodes/s per
spec (schedulers use the simulator fast path; ``mara`` is driven through the env and the
flow wrapper, and decodes each round at once).  Then times the shipped policy on the rounds
of one episode: a round decoded at once, as the harness acts, against node by node, one
observation per call.  Wall-clock figures: they depend on the machine and on what else it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from mara_agents.evaluation.runner import evaluate
from mara_env.config import ClusterConfig


def policy_forward(config: ClusterConfig, seed: int = 0) -> None:
    """Per-round cost of the shipped policy: one round decoded at once (as the harness
    acts) vs node by node, one observation per call, on the rounds of one episode."""
    from mara_agents.policy.runtime import MaraAgent
    from mara_env.cluster_env import raw_env

    agent = MaraAgent()
    env = raw_env(config=dataclasses.replace(config, num_slots=agent.num_slots))
    env.reset(seed=seed)
    agent.reset(env, seed)
    view = agent._rounds.aec  # the agent's predictor-wrapped view of env
    rounds, nodes = [], []
    for name in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        if name == env.possible_agents[0]:
            rounds.append(agent._rounds.observe())
            nodes.append([])
        nodes[-1].append(view.observe(name))
        env.step(agent.act(env, name))
    policy = agent.policy
    torch.set_num_threads(1)
    start = time.perf_counter()
    whole = [policy.act_round(r) for r in rounds]
    round_us = (time.perf_counter() - start) / len(rounds) * 1e6
    start = time.perf_counter()
    single = [[policy.act(o) for o in obs] for obs in nodes]
    node_us = (time.perf_counter() - start) / len(rounds) * 1e6
    same = np.mean([list(w) == s for w, s in zip(whole, single)])
    print(
        f"policy per round of {len(nodes[0])} nodes ({len(rounds)} rounds of one episode): "
        f"decoded at once {round_us:.0f} us, node by node {node_us:.0f} us "
        f"({node_us / round_us:.1f}x); same actions in {same:.1%} of the rounds"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=20, help="episodes per spec")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--specs", default="lara,edf,flow_share,mara", help="comma-separated specs")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    p.add_argument("--split", default="test", help="trace split")
    args = p.parse_args()
    config = ClusterConfig(traces=args.traces, split=args.split, num_nodes=16)
    for spec in args.specs.split(","):
        start = time.perf_counter()
        df = evaluate(
            [spec], [1.0], args.episodes, [0], config, workers=args.workers, progress=False
        )
        secs = time.perf_counter() - start
        print(
            f"{spec:>10}: {args.episodes / secs:7.1f} episodes/s "
            f"({secs:.1f} s for {args.episodes}, "
            f"{args.workers} worker(s), mean {df['tasks'].mean():.0f} tasks/episode)"
        )
    policy_forward(config)


if __name__ == "__main__":
    main()
