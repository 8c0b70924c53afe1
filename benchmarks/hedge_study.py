"""What prediction costs the hedge planner: the same planner on degraded exact work.

How to run:   python benchmarks/hedge_study.py [--episodes 10] [--loads 1.0,2.0]
                  [--sigmas 0.3,0.6] [--calibrated 0.25,0.5] [--urgency 0] [--wait 15]
                  [--split val] [--workers 2]
Runs ``hedge`` (mara_agents/baselines/hedge.py, with ``--urgency``) on the harness's
episodes (base seed 0, 16 nodes, ``padded`` deadlines) fed, in turn: each task's exact
remaining work from its arrival (``hedge:predictor=exact``); the exact work only from its
third report on, exploring before, as it must with the flow model (``wait``); the exact
total work times a fixed per-task error ``exp(sigma z)``, ``z`` standard normal drawn once
per task, from its third report on (``sigma=S``: a point estimate that does not know it is
wrong); a calibrated distribution from arrival (``calibrated=S``): log-normal with log
spread ``S`` about that same ``exp(S z)``-erred total, conditioned on exceeding the work
done, read as hedge's evenly spaced quantiles (what a predictor whose median is off by a
factor ``exp(0.674 S)`` half the time, and says so, would give); the deadline prior alone
(``deadline``); the flow model's samples (``flow``); and those fused with the deadline prior
(``flow+deadline``, the default ``hedge``).  Prints per load each feed's completion rate
and its paired difference from exact work (points, 95 % interval).
Results to expect: docs/baselines.md ("hedge").
"""

from __future__ import annotations

import argparse
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy.special import ndtr, ndtri

from flow_predictor.remaining import MIN_RATIO, MIN_REPORTS, RemainingWork
from mara_agents.baselines.hedge import Hedge
from mara_agents.evaluation.runner import episode_seed
from mara_agents.evaluation.stats import mean_ci
from mara_agents.planning.hedge_rule import DEFAULTS, HedgeParams
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

    def erred_total(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Each of ``tasks``' exact total work times its ``exp(sigma z)`` (the errors of
        every task of the episode drawn at its first call)."""
        if len(self.error) < len(sim.status):
            z = np.random.default_rng([self.seed, len(sim.status)]).standard_normal(len(sim.status))
            self.error = np.exp(self.sigma * z)
        return (sim.work[tasks] + sim.remaining_true(tasks)) * self.error[tasks]

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        unknown = np.array([len(sim.hist_work[k]) < MIN_REPORTS for k in tasks], bool)
        done = sim.work[tasks]
        total = self.erred_total(sim, tasks)
        left = np.maximum(total - done, 0.01 * done)
        return RemainingWork(np.where(unknown, np.nan, left)[:, None], unknown)


class Calibrated(LateExact):
    """From arrival, a log-normal of log spread ``sigma`` about each task's exact total
    work times ``exp(sigma z)`` (``z`` fixed per task), conditioned on exceeding the work
    done, as ``n`` evenly spaced quantiles of the remaining work."""

    def __init__(self, sigma: float, seed: int, n: int) -> None:
        super().__init__(sigma, seed)
        self.levels = (np.arange(n) + 0.5) / n

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        done = sim.work[tasks]
        median = self.erred_total(sim, tasks)
        with np.errstate(divide="ignore"):  # no work done yet: every level is above it
            below = ndtr(np.log(done / median) / self.sigma)
        levels = below[:, None] + (1 - below[:, None]) * self.levels[None, :]
        total = median[:, None] * np.exp(self.sigma * ndtri(np.minimum(levels, 1 - 1e-12)))
        left = np.maximum(total - done[:, None], MIN_RATIO * done[:, None])
        return RemainingWork(left, np.zeros(len(tasks), bool))


def planner(feed: str, seed: int, urgency: float = 0.0, wait: int = DEFAULTS.wait) -> Hedge:
    """The hedge planner (``urgency`` over ``wait`` ticks) on ``feed``: ``exact``,
    ``deadline``, ``flow``, ``flow+deadline``, ``wait``, ``sigma=S`` or ``calibrated=S``."""
    if feed in ("exact", "deadline", "flow", "flow+deadline"):
        return Hedge(predictor=feed, urgency=urgency, wait=wait)
    hedge = Hedge(predictor="exact", urgency=urgency, wait=wait)
    sigma = 0.0 if feed == "wait" else float(feed.split("=")[1])
    if feed.startswith("calibrated="):
        hedge._predictions = Calibrated(sigma, seed, hedge.params.quantiles)
    else:
        hedge._predictions = LateExact(sigma, seed)
    return hedge


def episode(job: tuple[str, float, int, str, float, int]) -> tuple[str, float, int, float]:
    """Completion rate of one episode of ``feed`` at ``load``."""
    feed, load, i, split, urgency, wait = job
    config = ClusterConfig(split=split, load=load)
    seed = episode_seed(0, load, i)
    m = run_episode(planner(feed, seed, urgency, wait), config, load_traces(split=split), seed)
    return feed, load, i, m["completion_rate"]


def main() -> None:
    """Parse the arguments, run every feed's episodes and print the table."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=10, help="episodes per load (default 10)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument(
        "--sigmas", default="0.3,0.6", help="point estimates' per-task log errors (default 0.3,0.6)"
    )
    p.add_argument(
        "--calibrated",
        default="",
        help="log spreads of calibrated distributions from arrival, e.g. 0.25,0.5 (default none)",
    )
    p.add_argument(
        "--urgency", type=float, default=0.0, help="the planner's urgency knob (default 0)"
    )
    p.add_argument(
        "--wait",
        type=int,
        default=DEFAULTS.wait,
        help=f"urgency's wait in ticks (default {DEFAULTS.wait}, hedge's)",
    )
    p.add_argument("--split", default="val", help="trace split (default val)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = p.parse_args()
    if args.episodes < 2:
        p.error("--episodes must be >= 2 (paired intervals)")
    try:  # the planner's own checks of its knobs
        HedgeParams(urgency=args.urgency, wait=args.wait)
    except ValueError as exc:
        p.error(f"--urgency {args.urgency:g} --wait {args.wait}: {exc}")
    try:
        sigmas = [float(v) for v in args.sigmas.split(",") if v]
        spreads = [float(v) for v in args.calibrated.split(",") if v]
        loads = [float(v) for v in args.loads.split(",")]
    except ValueError as exc:
        p.error(f"--sigmas, --calibrated and --loads take comma-separated numbers ({exc})")
    if any(v <= 0 for v in spreads):
        p.error("--calibrated: every spread must be > 0")
    feeds = [
        "exact",
        "wait",
        *(f"sigma={v}" for v in sigmas),
        *(f"calibrated={v}" for v in spreads),
        "deadline",
        "flow",
        "flow+deadline",
    ]
    jobs = [
        (f, load, i, args.split, args.urgency, args.wait)
        for f in feeds
        for load in loads
        for i in range(args.episodes)
    ]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        rates = {(f, load, i): r for f, load, i, r in pool.map(episode, jobs)}
    print(
        f"hedge (urgency {args.urgency:g}, wait {args.wait}) on degraded work, {args.split}, "
        f"{args.episodes} episodes per load:"
    )
    for load in loads:
        exact = np.array([rates["exact", load, i] for i in range(args.episodes)])
        for f in feeds:
            x = np.array([rates[f, load, i] for i in range(args.episodes)])
            d, h = mean_ci(100 * (x - exact))
            print(f"  load {load:g}  {f:15s} {x.mean():.3f}   vs exact {d:+.1f} ± {h:.1f} points")


if __name__ == "__main__":
    main()
