"""What evaluating costs: the shipped policy's seconds per episode against the bare env's.

How to run:   python benchmarks/eval_speed.py [--episodes 20] [--split val] [--load 1.0]
                  [--specs lara,edf,flow_share,mara] [--workers 1] [--traces FILE]

1. **The policy against the bare env**, on the same val episodes, in this process: each
   episode is run by the bare AEC env under a driver of uniformly random valid actions
   (``agent_iter`` + ``last`` + a choice from the mask, as ``env_speed.py`` drives it),
   then by the shipped policy as the harness runs it (one agent built once, reset per
   episode, acting round by round; its flow features included).  The two alternate, so
   other load on the machine hits both alike.  Prints the seconds per episode of each
   (median over episodes) and, last, ``shipped policy / random driver per episode: R``,
   the median of the per-episode ratios.
2. **The harness**: episodes/s of each spec through ``evaluate`` (worker start-up
   included).
3. **One round of the policy**: the greedy decoder (as the harness acts) on the rounds of
   one episode, per round.

Results to expect (2 cores, no GPU): about 0.03 s per episode for the random driver and
five times that for the policy at N = 16.  Wall-clock figures depend on the machine and
on what else it runs; the ratio much less so.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from mara_agents.evaluation.runner import build, episode_seed, evaluate, run_agent_episode
from mara_env.cluster_env import play_random, raw_env
from mara_env.config import ClusterConfig
from mara_env.traces import TraceSet, load_traces


def random_episode(config: ClusterConfig, traces: TraceSet, seed: int) -> float:
    """CPU seconds of one episode of the bare AEC env under uniformly random valid actions."""
    start = time.process_time()
    play_random(raw_env(config=config, trace_set=traces), seed)
    return time.process_time() - start


def policy_vs_env(config: ClusterConfig, traces: TraceSet, episodes: int) -> float:
    """Part 1: per-episode seconds of the shipped policy and of the random driver; returns
    the median per-episode ratio."""
    agent = build("mara=")
    config = dataclasses.replace(config, num_slots=agent.slots_for(config.num_nodes))
    seeds = [episode_seed(0, config.load, i) for i in range(episodes)]
    run_agent_episode(agent, config, traces, seeds[0])  # warm-up: caches, lazy imports
    random_episode(config, traces, seeds[0])
    ours, bare = [], []
    for seed in seeds:
        start = time.process_time()
        run_agent_episode(agent, config, traces, seed)
        ours.append(time.process_time() - start)
        bare.append(random_episode(config, traces, seed))
    ratios = [a / b for a, b in zip(ours, bare)]
    print(
        f"{episodes} {config.split} episodes, load {config.load:g}, N={config.num_nodes}, "
        f"K={config.num_slots}, one process:"
    )
    print(f"  random valid actions (bare AEC env): {statistics.median(bare):.3f} CPU s/episode")
    print(f"  shipped policy (as the harness runs it): {statistics.median(ours):.3f} CPU s/episode")
    print(f"  per-episode ratio range {min(ratios):.1f}-{max(ratios):.1f}")
    return statistics.median(ratios)


def harness(
    config: ClusterConfig, traces: TraceSet, specs: list[str], episodes: int, workers: int
) -> None:
    """Part 2: episodes/s of each spec through ``evaluate``."""
    for spec in specs:
        start = time.perf_counter()
        df = evaluate(
            [spec], [config.load], episodes, [0], config, traces, workers=workers, progress=False
        )
        secs = time.perf_counter() - start
        print(
            f"  {spec:>10}: {episodes / secs:7.1f} episodes/s ({secs:.1f} s for {episodes}, "
            f"{workers} worker(s), mean {df['tasks'].mean():.0f} tasks/episode)"
        )


def policy_round(config: ClusterConfig, traces: TraceSet, seed: int = 0) -> None:
    """Part 3: one round of the shipped policy, decoded greedily as the harness acts."""
    from mara_env.round_env import RoundEnv
    from mara_env.threads import single_threaded

    agent = build("mara=")
    config = dataclasses.replace(config, num_slots=agent.slots_for(config.num_nodes))
    env = raw_env(config=config, trace_set=traces)
    env.reset(seed=seed)
    agent.reset(env, seed)
    driver = RoundEnv(env)
    rounds = []
    while not env.engine.finished:
        rounds.append(agent._rounds.observe())
        driver.play(agent.act_round(env))
    start = time.perf_counter()
    with single_threaded():
        for obs in rounds:
            agent.policy.act_round(obs)
    us = (time.perf_counter() - start) / len(rounds) * 1e6
    print(
        f"  greedy decoder: {us:.0f} us per round of {config.num_nodes} nodes, {len(rounds)} rounds"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=20, help="episodes per part (default 20)")
    p.add_argument("--split", default="val", help="trace split of the episodes (default val)")
    p.add_argument("--load", type=float, default=1.0, help="load factor (default 1.0)")
    p.add_argument("--nodes", type=int, default=16, help="cluster size N (default 16)")
    p.add_argument(
        "--specs", default="lara,edf,flow_share,mara", help="specs timed through the harness"
    )
    p.add_argument("--workers", type=int, default=1, help="harness worker processes (default 1)")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    args = p.parse_args()
    if args.episodes < 1 or args.workers < 1:
        p.error("--episodes and --workers: expected positive integers")
    config = ClusterConfig(
        traces=args.traces, split=args.split, num_nodes=args.nodes, load=args.load
    )
    traces = load_traces(config.traces, split=config.split)
    print("1. the shipped policy against the bare env")
    ratio = policy_vs_env(config, traces, args.episodes)
    print("2. the harness")
    harness(config, traces, args.specs.split(","), args.episodes, args.workers)
    print("3. one round of the policy")
    policy_round(config, traces)
    print(f"shipped policy / random driver per episode: {ratio:.2f}")


if __name__ == "__main__":
    main()
