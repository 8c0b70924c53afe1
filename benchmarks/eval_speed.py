"""Episodes per second of the evaluation harness (load 1.0, 16 nodes), and the policy's cost.

How to run:   python benchmarks/eval_speed.py [--episodes 20] [--workers 1]
                  [--specs lara,edf,flow_share,mara] [--traces FILE]
Runs ``mara_agents.runner.evaluate`` without writing outputs and prints episodes/s per
spec (schedulers use the simulator fast path; ``mara`` acts node by node through the env
and the flow wrapper).  Then times the shipped policy's forward pass for one observation,
as the harness calls it (numpy actor) and through the torch network, on the observations
of one episode.  Wall-clock figures: they depend on the machine and on what else it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from mara_agents.runner import evaluate
from mara_env.config import ClusterConfig


def policy_forward(config: ClusterConfig, seed: int = 0) -> None:
    """Per-observation forward time of the shipped policy: numpy actor vs torch network."""
    from mara_agents.policy import MaraAgent
    from mara_env.cluster_env import raw_env

    agent = MaraAgent()
    env = raw_env(config=dataclasses.replace(config, num_slots=agent.num_slots))
    env.reset(seed=seed)
    agent.reset(env, seed)
    obs = []
    for name in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        obs.append(agent._view.observe(name))
        env.step(agent.act(env, name))
    policy, net = agent.policy, agent.policy.net
    torch.set_num_threads(1)
    start = time.perf_counter()
    fast = [policy.logits(o).argmax() for o in obs]
    numpy_us = (time.perf_counter() - start) / len(obs) * 1e6
    start = time.perf_counter()
    with torch.no_grad():
        ref = [
            int(
                net.logits(
                    torch.from_numpy(o["observation"][None]),
                    torch.from_numpy(o["action_mask"][None].astype(np.float32)),
                ).argmax()
            )
            for o in obs
        ]
    torch_us = (time.perf_counter() - start) / len(obs) * 1e6
    same = np.mean(np.asarray(fast) == np.asarray(ref))
    print(
        f"policy forward, one observation ({len(obs)} from one episode): numpy actor "
        f"{numpy_us:.0f} us, torch {torch_us:.0f} us ({torch_us / numpy_us:.1f}x); "
        f"same action for {same:.1%}"
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
