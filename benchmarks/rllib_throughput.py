"""End-to-end PPO throughput of both training paths against the bare env, in one run.

How to run::

    python benchmarks/rllib_throughput.py [--seconds 120] [--wrapper none|flow|wls]

Trains ``experiments/mara_node.yaml`` (node view: one RLlib step per node decision,
through RLlib's ``PettingZooEnv``) and ``experiments/mara.yaml`` (round view: one step per
decision round of all 16 nodes; its env runners, loads and PPO settings) for ``--seconds``
of training each: the algorithm ``mara train`` builds
(:func:`mara_agents.training.ppo.build_config`: env runner sampling plus PPO updates),
built in this driver (one torch thread, as in the trial actor Tune would start) and
trained iteration by iteration, without behaviour cloning or checkpoints, 16 nodes, 32
slots, with the chosen wrapper.  The round view's env runners step their envs as one
:class:`~mara_agents.training.rllib_env.RoundVectorEnv`
(:data:`~mara_agents.training.rllib_env.VECTOR_MODE`): one predictor call per step of all
its envs (``--one-by-one``: RLlib's default vector env, one call per env).

**What is counted.** CPU time, not wall time: on a machine that other jobs share, wall
time measures them as much as the training.  The training's CPU time is that of every
process it runs (this driver with the algorithm and its learner, Ray's processes, the env
runners; read from ``/proc`` right before and right after each iteration).  An
iteration's throughput is its node decisions per CPU second, times the CPUs the training
may use (Ray's, here all of the machine's): the node decisions per second of wall time
the training would reach on a machine of its own if it kept every core busy (it does not:
the PPO update runs on one core while the env runners wait).  The bare env is the
unwrapped AEC env of the same config driven by uniformly random valid actions, its
agent-steps per CPU second of its own thread, timed for ``--env-seconds`` before the
first iteration and after each one: **each iteration is divided by the mean of the two
bare-env turns around it**, so that the host's drift (tens of percent within minutes on
a shared machine) moves both.  The printed ratio is the median of those paired ratios
over the iterations (the first left out: it builds the envs and modules), with the
middle half of them, the wall-time figure beside it, and how busy the cores were.
RLlib's timers of the last iteration, and the CPU time of each kind of process per
iteration, say where the time goes.  The first line says what kind of machine it is: the
ratio divides torch-heavy training by an interpreted env, so it is higher where
interpreted Python is slow relative to BLAS (docs/training.md, "Throughput").

The last line printed is ``training/bare-env ratio: R`` for the round view.
Results to expect: see docs/training.md ("Round-level training", "Throughput").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from mara_agents.policy.features import make_wrapped_env
from mara_agents.training.experiment import Experiment, load_experiment
from mara_agents.training.rllib_env import VECTOR_MODE

ROOT = Path(__file__).parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def env_rate(exp: Experiment, seconds: float) -> tuple[float, float]:
    """Agent steps per CPU second and per wall second of the bare AEC env with uniformly
    random valid actions, for ``seconds`` of CPU time.

    CPU time of this thread only: beside a running Ray, the driver's own threads (Ray's
    core worker's) use CPU time that is not the env's."""
    env = make_wrapped_env({**exp.env_config(), "wrapper": "none"})
    rng = np.random.default_rng(0)
    done, episode = 0, 0
    t0, w0 = time.thread_time(), time.perf_counter()
    while time.thread_time() - t0 < seconds:
        env.reset(seed=episode)
        episode += 1
        for _ in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            valid = np.flatnonzero(obs["action_mask"])
            env.step(None if term or trunc else int(rng.choice(valid)))
            done += 1
    return done / (time.thread_time() - t0), done / (time.perf_counter() - w0)


def experiment(path: str, wrapper: str, seconds: float, together: bool = True) -> Experiment:
    """The experiment file with the benchmark's settings: from scratch, timed, no checkpoints
    (``together``: the round view's env runners step their envs as one vector env, as
    ``mara train`` does; else with RLlib's own ``"sync"`` vector env, one env at a time)."""
    exp = load_experiment(ROOT / "experiments" / path)
    rllib = dict(exp.rllib)
    if exp.view == "round":
        mode = VECTOR_MODE if together else {"gym_env_vectorize_mode": "sync"}
        rllib["env_runners"] = {**rllib.get("env_runners", {}), **mode}
    return dataclasses.replace(
        exp,
        name=f"bench_{exp.name}",
        wrapper=wrapper,
        wrapper_options={},
        pretrain=dataclasses.replace(exp.pretrain, episodes=0, init_weights=""),
        stop={"time_total_s": seconds},
        checkpoint=dataclasses.replace(exp.checkpoint, frequency=0, at_end=False),
        rllib=rllib,
    )


# What each process of a training run is, by the start of its command line (Ray names its
# workers after what they run); the others are this driver (the algorithm and its learner)
# and Ray's own processes.
ROLES = {
    "ray::SingleAgentEnvRunner": "env runners",
    "ray::MultiAgentEnvRunner": "env runners",
}


class TreeClock:
    """CPU seconds used so far by this process and each of its descendants (``/proc``),
    sampled when asked; a process that ended keeps what it had used at its last sample."""

    def __init__(self) -> None:
        self.used: list[dict[int, float]] = []  # per sample: pid -> CPU seconds so far
        self.names: dict[int, str] = {}  # pid -> command line (as last read)

    @staticmethod
    def _read(path: str) -> str | None:
        try:
            with open(path) as f:
                return f.read()
        except OSError:  # the process is gone
            return None

    def _discover(self) -> list[int]:
        """The processes of the tree now (their command lines into ``names``)."""
        children: dict[int, list[int]] = {}
        for entry in os.scandir("/proc"):
            stat = self._read(f"/proc/{entry.name}/stat") if entry.name.isdigit() else None
            if stat is not None:
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
        tree, todo = [], [os.getpid()]
        while todo:
            tree.append(todo.pop())
            todo += children.get(tree[-1], [])
            line = self._read(f"/proc/{tree[-1]}/cmdline")
            if line:
                self.names[tree[-1]] = line.replace("\0", " ").strip()
        return tree

    def sample(self) -> int:
        """Record the tree's CPU seconds now; the sample's index."""
        used = dict(self.used[-1]) if self.used else {}
        for pid in self._discover():
            stat = self._read(f"/proc/{pid}/stat")
            if stat is not None:
                fields = stat.rsplit(")", 1)[1].split()
                used[pid] = max(used.get(pid, 0.0), (int(fields[11]) + int(fields[12])) / TICKS)
        self.used.append(used)
        return len(self.used) - 1

    def role(self, pid: int) -> str:
        """What the process is (:data:`ROLES`, the driver, or one of Ray's own)."""
        if pid == os.getpid():
            return "driver"
        name = self.names.get(pid, "")
        return next((r for start, r in ROLES.items() if name.startswith(start)), "Ray")

    def spent(self, spans: list[tuple[int, int]]) -> dict[str, np.ndarray]:
        """CPU seconds the processes of each role used between the samples of each
        ``(first, last)`` span, and ``"all"`` of them."""
        out: dict[str, np.ndarray] = {"all": np.zeros(len(spans))}
        for pid in sorted({p for used in self.used for p in used}):
            column = np.array(
                [self.used[j].get(pid, 0.0) - self.used[i].get(pid, 0.0) for i, j in spans]
            )
            role = self.role(pid)
            out[role] = out.get(role, 0.0) + column
            out["all"] = out["all"] + column
        return out


def train_interleaved(
    exp: Experiment, bare_exp: Experiment, env_seconds: float
) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, np.ndarray], list[tuple[float, float]]]:
    """One training run, its iterations taking turns with bare-env timings.

    The algorithm is the one ``mara train`` builds (:func:`~mara_agents.training.ppo.build_config`;
    built here in this driver, one torch thread as in the trial actor Tune would start)
    and runs until ``exp.stop``'s ``time_total_s`` of training.  Before the first
    iteration and after each one, the bare env runs for ``env_seconds`` of CPU time, so
    that every iteration lies between two bare-env turns of the same minute.

    Returns each iteration's result, the wall seconds and by role the CPU seconds of the
    run's processes during each iteration (sampled right before and after it; the bare
    turns in between are not counted), and the bare-env turns (per CPU s, per wall s).
    """
    import ray
    import torch

    from mara_agents.training.ppo import build_config
    from mara_agents.training.records import check_inputs

    check_inputs(exp)
    if not ray.is_initialized():
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    budget = float(exp.stop["time_total_s"])
    algo = build_config(exp).build_algo()
    clock, trained = TreeClock(), 0.0
    results, walls, spans, bare = [], [], [], [env_rate(bare_exp, env_seconds)]
    try:
        while trained < budget:
            first, w0 = clock.sample(), time.perf_counter()
            results.append(algo.train())
            walls.append(time.perf_counter() - w0)
            spans.append((first, clock.sample()))
            trained += walls[-1]
            bare.append(env_rate(bare_exp, env_seconds))
    finally:
        algo.stop()
    return results, np.array(walls), clock.spent(spans), bare


@dataclasses.dataclass(frozen=True)
class Throughput:
    """Node decisions per second of one training run, per iteration and over all of them
    (iterations 2 … last), and each iteration's ratio to the bare env around it."""

    per_iteration: np.ndarray  # CPU-based
    ratios: np.ndarray  # per iteration, over the mean of the bare-env turns before and after
    cpu_rate: float  # all those iterations together, CPU-based
    wall_rate: float  # the same by wall time
    busy: float  # CPU seconds per wall second per CPU
    cpu_per_iteration: dict[str, float]  # mean CPU seconds of an iteration, by role
    decisions: float
    seconds: float


def throughput(
    results: list[dict[str, Any]],
    walls: np.ndarray,
    cpu: dict[str, np.ndarray],
    bare: list[tuple[float, float]],
    cpus: int,
) -> Throughput:
    """Node decisions per (CPU seconds / ``cpus``) of each iteration after the first, and
    its ratio to the bare env's agent-steps per CPU second in the turns around it."""
    if len(results) < 2:
        raise RuntimeError("one iteration only: raise --seconds so that a second one runs")
    decisions = np.diff([r["mara"]["node_decisions"] for r in results])
    used = {role: c[1:] for role, c in cpu.items()}
    around = np.array([b[0] for b in bare])
    around = (around[1:-1] + around[2:]) / 2  # the turns before and after iterations 2 …
    per_iteration = decisions / (used["all"] / cpus)
    return Throughput(
        per_iteration=per_iteration,
        ratios=per_iteration / around,
        cpu_rate=decisions.sum() / (used["all"].sum() / cpus),
        wall_rate=decisions.sum() / walls[1:].sum(),
        busy=used["all"].sum() / walls[1:].sum() / cpus,
        cpu_per_iteration={role: float(u.mean()) for role, u in used.items()},
        decisions=decisions.sum(),
        seconds=walls[1:].sum(),
    )


def cpu_line(tp: Throughput) -> str:
    """Where an iteration's CPU time goes, by role."""
    split = dict(tp.cpu_per_iteration)
    total = split.pop("all")
    parts = ", ".join(f"{role} {split[role]:.2f} s" for role in sorted(split, key=split.get)[::-1])
    return f"    CPU per iteration {total:.2f} s: {parts}"


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


def spread_line(label: str, tp: Throughput, bare: float, bare_wall: float) -> str:
    """The middle half of the iterations' paired ratios, the pooled and the wall-time ratio
    (these two over the median bare-env turn)."""
    lo, hi = np.percentile(tp.ratios, [25, 75])
    return (
        f"{label}: iterations {lo:.3f}-{hi:.3f} (middle half, each over the bare turns around "
        f"it), all together {tp.cpu_rate / bare:.3f}; by wall time {tp.wall_rate / bare_wall:.3f}"
    )


def machine_line() -> str:
    """How fast this machine runs interpreted Python and a BLAS product, one thread each:
    the bare env is the first kind of work, the PPO update and the module mostly the
    second, so the ratio moves with their balance from one machine to the next."""
    import timeit

    from mara_env.threads import single_threaded

    loop = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000
    a, w = np.ones((256, 128), np.float32), np.ones((128, 128), np.float32)
    out = np.empty((256, 128), np.float32)
    with single_threaded():
        mm = min(timeit.repeat(lambda: np.matmul(a, w, out=out), number=500, repeat=5)) / 500
    return (
        f"machine: interpreted loop sum(range(1000)) {loop * 1e6:.1f} us; float32 product "
        f"256x128 @ 128x128 {2 * 256 * 128 * 128 / mm / 1e9:.0f} GFLOP/s (one thread)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=120.0, help="training time of each path")
    p.add_argument(
        "--env-seconds",
        type=float,
        default=3.0,
        help="bare-env timing (CPU seconds) of each turn: one before the first iteration "
        "and one after each",
    )
    p.add_argument("--wrapper", default="none", help="none | flow | wls (headline: none)")
    p.add_argument(
        "--views",
        default="node,round",
        help="training paths to time, comma-separated: node, round (default both; the "
        "ratios that need a path left out are not printed)",
    )
    p.add_argument(
        "--one-by-one",
        action="store_true",
        help="step each round-view env runner's envs one by one (RLlib's default vector "
        "env: a predictor call per env) instead of together",
    )
    args = p.parse_args()
    views = [v.strip() for v in args.views.split(",") if v.strip()]
    if not views or set(views) - {"node", "round"}:
        p.error(f"--views {args.views!r}: expected node, round or node,round")
    if args.seconds <= 0 or args.env_seconds <= 0:
        p.error("--seconds and --env-seconds: expected positive numbers")
    if not os.path.isdir("/proc"):
        p.error("the training's CPU time is read from /proc: Linux only")
    import ray

    node = experiment("mara_node.yaml", args.wrapper, args.seconds)
    rounds = experiment("mara.yaml", args.wrapper, args.seconds, not args.one_by_one)
    n, cpus = node.env.num_nodes, os.cpu_count() or 1
    loads = ", ".join(f"{x:g}" for x in rounds.train_loads or [rounds.env.load])
    print(
        f"config: {n} nodes, {node.env.num_slots} slots, wrapper {args.wrapper}, "
        f"{args.seconds:.0f} s of PPO per path (node view at load {node.env.load:g}, round "
        f"view at loads {loads}, envs stepped {'one by one' if args.one_by_one else 'together'}), "
        f"{cpus} CPUs",
        flush=True,
    )
    print(machine_line(), flush=True)
    rates: dict[str, Throughput] = {}
    bare: list[tuple[float, float]] = []
    try:
        for label, exp in (("node", node), ("round", rounds)):
            if label not in views:
                continue
            results, walls, cpu, turns = train_interleaved(exp, node, args.env_seconds)
            bare += turns
            tp = rates[label] = throughput(results, walls, cpu, turns, cpus)
            print(
                f"{label} view: {tp.cpu_rate:,.0f} node decisions/s on {cpus} busy CPUs "
                f"({tp.wall_rate:,.0f} per wall s, the CPUs {tp.busy:.0%} busy; "
                f"{tp.decisions:,.0f} in {tp.seconds:.0f} s after the first of "
                f"{len(results)} iterations)",
                flush=True,
            )
            envs = exp.rllib["env_runners"]["num_envs_per_env_runner"]
            print(where_time_goes(results[-1], envs), flush=True)
            print(cpu_line(tp), flush=True)
            rates_cpu = np.array([t[0] for t in turns])
            print(
                f"    bare env in the {len(turns)} turns around its iterations: "
                f"{np.median(rates_cpu):,.0f} agent-steps per CPU s "
                f"({rates_cpu.min():,.0f}-{rates_cpu.max():,.0f})",
                flush=True,
            )
    finally:
        ray.shutdown()
    cpu_rates, wall_rates = np.array(bare).T
    env, env_wall = float(np.median(cpu_rates)), float(np.median(wall_rates))
    print(
        f"bare env: median {env:,.0f} agent-steps per CPU s over {len(bare)} turns "
        f"({cpu_rates.min():,.0f}-{cpu_rates.max():,.0f}; per wall s {env_wall:,.0f})"
    )
    if "node" in rates:
        print(spread_line("node view", rates["node"], env, env_wall))
        print(f"node view training/bare-env ratio: {np.median(rates['node'].ratios):.3f}")
    if len(rates) == 2:
        print(f"round view / node view: {rates['round'].cpu_rate / rates['node'].cpu_rate:.1f}x")
    if "round" in rates:
        print(spread_line("round view", rates["round"], env, env_wall))
        print(f"training/bare-env ratio: {np.median(rates['round'].ratios):.3f}")


if __name__ == "__main__":
    main()
