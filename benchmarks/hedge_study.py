"""What prediction costs the hedge planner: the same planner on degraded exact work.

How to run:   python benchmarks/hedge_study.py [--episodes 10] [--loads 1.0,2.0]
                  [--sigmas 0.3,0.6] [--split val] [--workers 2]
Runs ``hedge`` (mara_agents/baselines/hedge.py) on the harness's episodes (base seed 0,
16 nodes) fed, in turn: each task's exact remaining work from its arrival
(``hedge:predictor=exact``); the exact work only from its third report on, exploring
before, as it must with the flow model (``wait``); the exact total work times a fixed
per-task error ``exp(sigma z)``, ``z`` standard normal drawn once per task, from its third
report on (``sigma=S``); the flow model's samples (``flow``); and those fused with the
deadline prior (``flow+deadline``, the default ``hedge``).  Prints per load each
feed's completion rate and its paired difference from exact work (points, 95 % interval).
Results to expect: docs/baselines.md ("hedge").
"""

from __future__ import annotations

import argparse
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from flow_predictor.remaining import MIN_REPORTS, RemainingWork
from mara_agents.baselines.hedge import Hedge
from mara_agents.evaluation.runner import episode_seed
from mara_agents.evaluation.stats import mean_ci
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import run_episode
from mara_env.traces import load_traces


class LateExact:
    """Each task's exact total work times ``exp(sigma z)`` (``z`` fixed per task), as a
    one-sample prediction from its :data:`MIN_REPORTS`-th report on (unknown before)."""

    def __init__(self, sigma: float, seed: int) -> None:
        self.sigma = sigma
        self.seed = seed
        self.error = np.zeros(0)

    def clear(self) -> None:
        """New episode: new per-task errors (drawn when first needed)."""
        self.error = np.zeros(0)

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        if len(self.error) < len(sim.status):
            z = np.random.default_rng([self.seed, len(sim.status)]).standard_normal(len(sim.status))
            self.error = np.exp(self.sigma * z)
        unknown = np.array([len(sim.hist_work[k]) < MIN_REPORTS for k in tasks], bool)
        done = sim.work[tasks]
        total = (done + sim.remaining_true(tasks)) * self.error[tasks]
        left = np.maximum(total - done, 0.01 * done)
        return RemainingWork(np.where(unknown, np.nan, left)[:, None], unknown)


def planner(feed: str, seed: int) -> Hedge:
    """The hedge planner on ``feed``: ``exact``, ``flow``, ``flow+deadline``, ``wait`` or
    ``sigma=S``."""
    if feed in ("exact", "flow", "flow+deadline"):
        return Hedge(predictor=feed)
    hedge = Hedge(predictor="exact")
    sigma = 0.0 if feed == "wait" else float(feed.split("=")[1])
    hedge._predictions = LateExact(sigma, seed)
    return hedge


def episode(job: tuple[str, float, int, str]) -> tuple[str, float, int, float]:
    """Completion rate of one episode of ``feed`` at ``load``."""
    feed, load, i, split = job
    config = ClusterConfig(split=split, load=load)
    seed = episode_seed(0, load, i)
    m = run_episode(planner(feed, seed), config, load_traces(split=split), seed)
    return feed, load, i, m["completion_rate"]


def main() -> None:
    """Parse the arguments, run every feed's episodes and print the table."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=10, help="episodes per load (default 10)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--sigmas", default="0.3,0.6", help="per-task log errors (default 0.3,0.6)")
    p.add_argument("--split", default="val", help="trace split (default val)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = p.parse_args()
    if args.episodes < 2:
        p.error("--episodes must be >= 2 (paired intervals)")
    sigmas = (f"sigma={s}" for s in args.sigmas.split(","))
    feeds = ["exact", "wait", *sigmas, "flow", "flow+deadline"]
    loads = [float(v) for v in args.loads.split(",")]
    jobs = [(f, load, i, args.split) for f in feeds for load in loads for i in range(args.episodes)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        rates = {(f, load, i): r for f, load, i, r in pool.map(episode, jobs)}
    print(f"hedge on degraded work, {args.split}, {args.episodes} episodes per load:")
    for load in loads:
        exact = np.array([rates["exact", load, i] for i in range(args.episodes)])
        for f in feeds:
            x = np.array([rates[f, load, i] for i in range(args.episodes)])
            d, h = mean_ci(100 * (x - exact))
            print(f"  load {load:g}  {f:13s} {x.mean():.3f}   vs exact {d:+.1f} ± {h:.1f} points")


if __name__ == "__main__":
    main()
