"""RLlib sampling throughput on the MARA env: agent-steps/s of one env runner.

How to run::

    python benchmarks/rllib_throughput.py [--traces PATH --split all] [--steps 20000]

Builds RLlib's ``MultiAgentEnvRunner`` in-process (no Ray workers) with the MARA module
and times ``sample()`` for several ``num_envs_per_env_runner`` settings ("before" = one
env per runner, RLlib's default), then the pure env loop for reference.
Results to expect: see docs/training.md ("Throughput").
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from mara_agents.experiment import parse_experiment
from mara_agents.rllib_env import make_wrapped_env
from mara_agents.train import build_config


def sample_rate(exp, num_envs: int, steps: int) -> float:
    """Agent steps per second of one in-process env runner with ``num_envs`` envs."""
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    config = build_config(exp, num_env_runners=0).env_runners(num_envs_per_env_runner=num_envs)
    runner = MultiAgentEnvRunner(config=config)
    torch.set_num_threads(1)  # as in training (MaraMetrics.on_environment_created)
    runner.sample(num_timesteps=2000, random_actions=False)  # warm-up
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        episodes = runner.sample(num_timesteps=min(4000, steps - done))
        done += sum(e.env_steps() for e in episodes)
    rate = done / (time.perf_counter() - t0)
    runner.stop()
    return rate


def env_rate(exp, steps: int) -> float:
    """Agent steps per second of the bare AEC env with uniformly random valid actions."""
    env = make_wrapped_env(exp.env_config())
    rng = np.random.default_rng(0)
    done, episode = 0, 0
    t0 = time.perf_counter()
    while done < steps:
        env.reset(seed=episode)
        episode += 1
        for _ in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            valid = np.flatnonzero(obs["action_mask"])
            env.step(None if term or trunc else int(rng.choice(valid)))
            done += 1
    return done / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    p.add_argument("--split", default="train", help="trace split")
    p.add_argument("--steps", type=int, default=20000, help="agent steps timed per setting")
    p.add_argument("--envs", default="1,4,8", help="num_envs_per_env_runner values to time")
    p.add_argument("--wrapper", default="none", help="none | flow | wls")
    args = p.parse_args()
    exp = parse_experiment(
        {
            "name": "bench",
            "env": {"num_nodes": 16, "num_slots": 8, "traces": args.traces, "split": args.split},
            "wrapper": args.wrapper,
        }
    )
    print(f"bare env loop: {env_rate(exp, args.steps):,.0f} agent-steps/s")
    for n in (int(x) for x in args.envs.split(",")):
        label = "before (RLlib default)" if n == 1 else "after"
        rate = sample_rate(exp, n, args.steps)
        print(f"num_envs_per_env_runner={n}: {rate:,.0f} agent-steps/s  [{label}]")


if __name__ == "__main__":
    main()
