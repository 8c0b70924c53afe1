"""How peaked a policy is: the probability it gives its own greedy action, per node decision.

PPO from a behaviour clone explores only where the clone's distribution is spread out.
This runs a policy greedily on a few validation episodes per load and prints, over all
node decisions, the share whose greedy action has probability above 0.99 / 0.9 or below
0.6, the mean entropy per node, and the share of the entropy held by the 5 % most
uncertain decisions (``docs/training.md``, "Group-relative advantages").

    python benchmarks/policy_peakedness.py                          # the shipped policy
    python benchmarks/policy_peakedness.py --policy runs/mara.pt --episodes 5
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from mara_agents.evaluation.runner import episode_seed
from mara_agents.policy.features import wrap
from mara_agents.policy.inference import load_policy
from mara_agents.policy.policy_file import SHIPPED_POLICY
from mara_agents.policy.rounds import decode
from mara_env.cluster_env import raw_env
from mara_env.config import ClusterConfig
from mara_env.round_env import RoundEnv
from mara_env.traces import load_traces


def greedy_probabilities(policy, config: ClusterConfig, traces, seed: int) -> np.ndarray:
    """Softmax ``(decisions, K + 1)`` of every node decision of one greedy episode."""
    env = raw_env(config=config, trace_set=traces)
    env.reset(seed=seed)
    rounds = RoundEnv(wrap(env, policy.wrapper, policy.meta.get("wrapper_options")))
    obs, done, probs = rounds.observe(), False, []
    while not done:
        batch = {k: torch.from_numpy(np.asarray(v))[None] for k, v in obs.items()}
        with torch.no_grad():
            actions, _, logits = decode(policy.net, batch, greedy=True)
        probs.append(torch.softmax(logits[0], -1).numpy())
        obs, _, term, trunc, _ = rounds.step(actions[0].numpy())
        done = term or trunc
    return np.concatenate(probs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default=str(SHIPPED_POLICY), help="policy file")
    parser.add_argument("--episodes", type=int, default=3, help="episodes per load")
    parser.add_argument("--loads", default="1.0,1.5,2.0", help="comma-separated loads")
    parser.add_argument("--split", default="val", help="trace split")
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = load_policy(args.policy)
    traces = load_traces(None, split=args.split)
    probs = []
    for load in (float(x) for x in args.loads.split(",")):
        config = ClusterConfig(split=args.split, load=load, num_slots=policy.net.layout.num_slots)
        for episode in range(args.episodes):
            seed = episode_seed(0, load, episode)
            probs.append(greedy_probabilities(policy, config, traces, seed))
    p = np.concatenate(probs)
    top = p.max(-1)
    entropy = -(p * np.log(np.clip(p, 1e-12, 1.0))).sum(-1)
    ranked = np.sort(entropy)[::-1]
    print(f"policy {args.policy}: {len(p)} node decisions ({args.split} split)")
    print(
        f"greedy action's probability > 0.99: {np.mean(top > 0.99):.3f}; "
        f"> 0.9: {np.mean(top > 0.9):.3f}; < 0.6: {np.mean(top < 0.6):.3f}"
    )
    print(
        f"mean entropy per node decision: {entropy.mean():.3f} nats; the 5 % most uncertain "
        f"decisions hold {ranked[: len(ranked) // 20].sum() / ranked.sum():.2f} of it"
    )


if __name__ == "__main__":
    main()
