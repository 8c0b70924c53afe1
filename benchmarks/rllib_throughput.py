"""End-to-end PPO throughput of both training paths against the bare env, in one run.

How to run::

    python benchmarks/rllib_throughput.py [--seconds 120] [--wrapper none|flow|wls]

Trains ``experiments/mara_node.yaml`` (node view: one RLlib step per node decision,
through RLlib's ``PettingZooEnv``) and ``experiments/mara.yaml`` (round view: one step per
decision round of all 16 nodes; its env runners and PPO settings) through
:func:`mara_agents.training.train.train` — what ``mara train`` runs: env runner sampling plus PPO
updates — for ``--seconds`` of training time each, without behaviour cloning or
checkpoints, 16 nodes, 32 slots, load 1.0, with the chosen wrapper.  The figure is
node decisions per second of training time divided by the agent-steps/s of the bare AEC
env driven by uniformly random valid actions, same config, timed before and after the
trainings (their mean).  The timers RLlib reports for the last iteration say where the
time goes.

The last line printed is ``training/bare-env ratio: R`` for the round view.
Results to expect: see docs/training.md ("Round-level training").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from flow_predictor.wrapper import make_wrapped_env
from mara_agents.training.experiment import Experiment, load_experiment

ROOT = Path(__file__).parents[1]


def env_rate(exp: Experiment, seconds: float) -> float:
    """Agent steps per second of the bare AEC env with uniformly random valid actions."""
    env = make_wrapped_env(exp.env_config())
    rng = np.random.default_rng(0)
    done, episode = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.reset(seed=episode)
        episode += 1
        for _ in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            valid = np.flatnonzero(obs["action_mask"])
            env.step(None if term or trunc else int(rng.choice(valid)))
            done += 1
    return done / (time.perf_counter() - t0)


def experiment(path: str, wrapper: str, seconds: float) -> Experiment:
    """The experiment file with the benchmark's settings: from scratch, timed, no checkpoints."""
    exp = load_experiment(ROOT / "experiments" / path)
    return dataclasses.replace(
        exp,
        name=f"bench_{exp.name}",
        wrapper=wrapper,
        wrapper_options={},
        pretrain=dataclasses.replace(exp.pretrain, episodes=0, init_weights=""),
        stop={"time_total_s": seconds},
        checkpoint=dataclasses.replace(exp.checkpoint, frequency=0, at_end=False),
    )


def train_rate(exp: Experiment, out: Path) -> tuple[float, dict[str, Any]]:
    """Node decisions per second of training time of one run, and its last result."""
    from mara_agents.training.train import train

    grid = train(exp, out=out, verbose=0)
    if grid[0].error:
        raise RuntimeError(f"{exp.name}: training failed: {grid[0].error}")
    lines = (Path(grid[0].path) / "result.json").read_text().splitlines()
    last = json.loads(lines[-1])
    return last["mara"]["node_decisions"] / last["time_total_s"], last


def where_time_goes(result: dict[str, Any], num_envs: int) -> str:
    """Per-iteration split (sampling / PPO update) and per-vector-step split of sampling."""
    t, r = result["timers"], result["env_runners"]
    sample, update = t["env_runner_sampling_timer"], t["learner_update_timer"]
    parts = {
        "env step": r["env_step_timer"],
        "module forward": r["rlmodule_inference_timer"],
        "env->module connectors": r["env_to_module_connector"]["connector_pipeline_timer"],
        "module->env connectors": r["module_to_env_connector"]["connector_pipeline_timer"],
    }
    step = " + ".join(f"{k} {v * 1e3:.1f} ms" for k, v in parts.items())
    return (
        f"    iteration: sampling {sample:.1f} s, PPO update {update:.1f} s; "
        f"per step of {num_envs} envs: {step}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=120.0, help="training time of each path")
    p.add_argument("--env-seconds", type=float, default=15.0, help="bare-env timing, each time")
    p.add_argument("--wrapper", default="none", help="none | flow | wls (headline: none)")
    p.add_argument(
        "--views",
        default="node,round",
        help="training paths to time, comma-separated: node, round (default both; the "
        "ratios that need a path left out are not printed)",
    )
    args = p.parse_args()
    views = [v.strip() for v in args.views.split(",") if v.strip()]
    if not views or set(views) - {"node", "round"}:
        p.error(f"--views {args.views!r}: expected node, round or node,round")
    if args.seconds <= 0 or args.env_seconds <= 0:
        p.error("--seconds and --env-seconds: expected positive numbers")
    import ray

    node = experiment("mara_node.yaml", args.wrapper, args.seconds)
    rounds = experiment("mara.yaml", args.wrapper, args.seconds)
    n = node.env.num_nodes
    print(
        f"config: {n} nodes, {node.env.num_slots} slots, load {node.env.load}, "
        f"wrapper {args.wrapper}, {args.seconds:.0f} s of PPO per path",
        flush=True,
    )
    before = env_rate(node, args.env_seconds)
    print(f"bare env (random valid actions), before: {before:,.0f} agent-steps/s", flush=True)
    rates = {}
    try:
        with tempfile.TemporaryDirectory() as out:
            for label, exp in (("node", node), ("round", rounds)):
                if label not in views:
                    continue
                rate, last = train_rate(exp, Path(out))
                rates[label] = rate
                envs = exp.rllib["env_runners"]["num_envs_per_env_runner"]
                print(
                    f"{label} view: {rate:,.0f} node decisions/s end to end "
                    f"({last['mara']['node_decisions']:,.0f} in {last['time_total_s']:.0f} s, "
                    f"{last['training_iteration']} iterations)",
                    flush=True,
                )
                print(where_time_goes(last, envs), flush=True)
    finally:
        ray.shutdown()
    after = env_rate(node, args.env_seconds)
    bare = (before + after) / 2
    print(f"bare env (random valid actions), after: {after:,.0f} agent-steps/s; mean {bare:,.0f}")
    if "node" in rates:
        print(f"node view training/bare-env ratio: {rates['node'] / bare:.3f}")
    if len(rates) == 2:
        print(f"round view / node view: {rates['round'] / rates['node']:.1f}x")
    if "round" in rates:
        print(f"training/bare-env ratio: {rates['round'] / bare:.3f}")


if __name__ == "__main__":
    main()
