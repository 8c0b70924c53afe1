"""What a node decision costs as the cluster grows: N = 16, 64, 256 and 512 nodes.

How to run:   python benchmarks/scale.py [--nodes 16,64,256,512] [--episodes 2]
                  [--load 1.0] [--split val] [--horizon 120] [--traces FILE]

For each cluster size N, on the same episodes (seeds as the harness draws them), in this
process, each of these runs an episode in turn (so other load on the machine hits all
alike), timed in CPU seconds of the process, on one thread as the harness plays it:

* ``env``: the bare AEC env under uniformly random valid actions (``agent_iter`` +
  ``last`` + a choice from the mask, as ``env_speed.py`` drives it);
* ``wrapper``: the same driver on the env wrapped with the flow predictor's features
  (every node observes them);
* ``flow_share`` and ``lara``: the schedulers on the simulator, as the harness runs them;
* ``policy``: the shipped policy through the env, as the harness runs it (one agent built
  once and reset per episode, acting round by round through its flow features).

The env, the wrapper and the policy observe ``K = slots_for(N)`` slots, the count the
harness gives the policy on a cluster of N nodes (32 at N = 16, 2 per node above).  A
node decision is one node's choice in one tick (ticks x N per episode).  Prints the
median CPU microseconds per node decision of each, per N, and last ``per-decision cost
N=256 / N=16: R`` for the policy through the env (the issue's goal: R <= 2).

Results to expect (2 cores, others running): the policy costs about as much per node
decision at N = 256 as at N = 16: its round costs grow as N x K, but the env's and the
predictor's per-round work is shared by more nodes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from tqdm import tqdm

from mara_agents.evaluation.runner import build, episode_seed, run_agent_episode
from mara_agents.policy.features import policy_predictor, wrap
from mara_env.cluster_env import play_random, raw_env
from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, run_episode
from mara_env.threads import single_threaded
from mara_env.traces import TraceSet, load_traces

METHODS = ("env", "wrapper", "flow_share", "lara", "policy")
REFERENCE_NODES, RATIO_NODES = 16, 256  # the sizes the last line compares


def random_driver(config: ClusterConfig, traces: TraceSet, seed: int, predictor: object) -> int:
    """One episode of the AEC env (wrapped with ``predictor``'s features unless None)
    under uniformly random valid actions; returns its ticks."""
    env = raw_env(config=config, trace_set=traces)
    play_random(env if predictor is None else wrap(env, "flow", predictor=predictor), seed)
    return env.engine.sim.t


def runners(agent: object, predictor: object) -> dict[str, Callable[..., int]]:
    """Each method as ``f(config, traces, seed) -> ticks`` (``config`` with the policy's
    slot count)."""
    schedulers: dict[str, Scheduler] = {name: build(name) for name in ("flow_share", "lara")}

    def scheduler(name: str) -> Callable[..., int]:
        return lambda config, traces, seed: run_episode(schedulers[name], config, traces, seed)[
            "ticks"
        ]

    return {
        "env": lambda config, traces, seed: random_driver(config, traces, seed, None),
        "wrapper": lambda config, traces, seed: random_driver(config, traces, seed, predictor),
        "flow_share": scheduler("flow_share"),
        "lara": scheduler("lara"),
        "policy": lambda config, traces, seed: run_agent_episode(agent, config, traces, seed)[
            "ticks"
        ],
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--nodes", default="16,64,256,512", help="cluster sizes N (default 16,64,256,512)"
    )
    p.add_argument("--episodes", type=int, default=2, help="episodes per size (default 2)")
    p.add_argument("--load", type=float, default=1.0, help="load factor (default 1.0)")
    p.add_argument("--split", default="val", help="trace split of the episodes (default val)")
    p.add_argument("--horizon", type=int, default=120, help="arrival ticks (default 120)")
    p.add_argument("--traces", default=None, help="trace library (default: the shipped one)")
    args = p.parse_args()
    try:
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError:
        p.error(f"--nodes {args.nodes!r}: expected comma-separated integers")
    if args.episodes < 1 or min(sizes) < 1:
        p.error("--episodes and --nodes: expected positive integers")
    if REFERENCE_NODES not in sizes or RATIO_NODES not in sizes:
        p.error(f"--nodes must include {REFERENCE_NODES} and {RATIO_NODES} (the last line)")
    base = ClusterConfig(traces=args.traces, split=args.split, load=args.load, horizon=args.horizon)
    traces = load_traces(base.traces, split=base.split)
    agent = build("mara=")
    policy = agent.policy
    run = runners(agent, policy_predictor(policy.wrapper, policy.meta.get("wrapper_options")))
    # warm-up: lazy imports, the flow model, caches
    small = replace(base, num_nodes=4, num_slots=agent.slots_for(4), horizon=10)
    for f in run.values():
        f(small, traces, 0)
    cost: dict[tuple[int, str], float] = {}
    bar = tqdm(total=len(sizes) * args.episodes * len(METHODS), unit="ep", desc="scale")
    for n in sizes:
        config = replace(base, num_nodes=n, num_slots=agent.slots_for(n))
        per: dict[str, list[float]] = {m: [] for m in METHODS}
        for i in range(args.episodes):
            seed = episode_seed(0, args.load, i)
            for m in METHODS:  # alternating: each method once per episode, in turn
                bar.set_postfix_str(f"N={n} {m}")
                start = time.process_time()
                with single_threaded():  # as the harness plays an episode (run_spec)
                    ticks = run[m](config, traces, seed)
                per[m].append((time.process_time() - start) / (ticks * n))
                bar.update()
        for m in METHODS:
            cost[n, m] = statistics.median(per[m])
    bar.close()
    print(
        f"CPU microseconds per node decision (median of {args.episodes} {args.split} "
        f"episodes, load {args.load:g}, K = slots the policy observes):"
    )
    print("| N | K | " + " | ".join(METHODS) + " |")
    print("|---|---|" + "---|" * len(METHODS))
    for n in sizes:
        cells = " | ".join(f"{cost[n, m] * 1e6:.1f}" for m in METHODS)
        print(f"| {n} | {agent.slots_for(n)} | {cells} |")
    ratio = cost[RATIO_NODES, "policy"] / cost[REFERENCE_NODES, "policy"]
    print(f"per-decision cost N={RATIO_NODES} / N={REFERENCE_NODES}: {ratio:.2f}")


if __name__ == "__main__":
    main()
