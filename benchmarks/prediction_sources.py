"""How well each source of remaining-work predictions knows the work: flow, deadline, fused.

How to run:   python benchmarks/prediction_sources.py [--episodes 6] [--loads 1.0,2.0]
                  [--split val]
Plays the harness's episodes (base seed 0, 16 nodes) with the ``hedge`` scheduler and, at
every tick, asks three sources for every active task's remaining-work samples: the flow
model alone (as ``hedge:predictor=flow`` reads it), the deadline prior alone
(``flow_predictor.deadline_prior``, fitted on the train split), and the two fused (what
``hedge`` and the ``flow+deadline`` wrapper read).  Against each task's exact remaining
work it prints, by the task's reports so far: how often a source has a prediction, its
median |log(median / truth)| (a median of "never" counts as an infinite error), the share
of truths inside its 10-90 % interval (0.8 when calibrated), and, for the chance that the
task's cap from now on finishes it by its deadline, the mean predicted chance against the
share that do (the pessimism or optimism a planner inherits).
Results to expect: docs/predictor.md ("The deadline prior").
"""

from __future__ import annotations

import argparse

import numpy as np

from flow_predictor.checkpoint import load_predictor
from flow_predictor.deadline_prior import DeadlineInformed, DeadlinePrior
from flow_predictor.remaining import FLOW_SAMPLES, PredictionCache
from mara_agents.baselines.hedge import Hedge
from mara_agents.evaluation.runner import episode_seed
from mara_agents.planning.hedge_rule import finish_chances
from mara_agents.planning.share_rule import DEFAULTS as SHARE
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import edf_order
from mara_env.traces import load_traces

BANDS = ((0, 3), (3, 6), (6, 12), (12, 10**9))


class Sources:
    """The three sources, each with its own cache, asked about the same tasks."""

    def __init__(self) -> None:
        prior = DeadlinePrior.load()
        model = load_predictor(n_samples=FLOW_SAMPLES)  # one model, a cache per source
        flow = PredictionCache(model, SHARE.refresh)
        fused = PredictionCache(model, SHARE.refresh)
        self.sources = {
            "flow": flow,
            "deadline": DeadlineInformed(prior, None, FLOW_SAMPLES),
            "fused": DeadlineInformed(prior, fused, FLOW_SAMPLES, Hedge().params.flow_spread),
        }

    def clear(self) -> None:
        for s in self.sources.values():
            s.clear()


def measure(sim: ClusterSim, sources: Sources, rows: list[tuple]) -> None:
    """One row per active task and source: (source, reports, known, |log error|, inside
    10-90 %, predicted chance at the cap, finishes at the cap)."""
    tasks = edf_order(sim)
    if not len(tasks):
        return
    wl = sim.workload
    truth = sim.remaining_true(tasks)
    args = (
        (wl.deadline[tasks] - sim.t).astype(np.float64),
        wl.cap[tasks],
        sim.nodes_now[tasks].astype(np.float64),
        wl.rate[tasks],
        wl.alpha[tasks],
    )
    exact, _ = finish_chances(truth[:, None], *args)
    at_cap = exact[np.arange(len(tasks)), wl.cap[tasks]]
    reports = np.array([len(sim.hist_work[k]) for k in tasks])
    for name, source in sources.sources.items():
        rw = source.get(sim, tasks)
        known = ~(rw.fallback | np.isnan(rw.samples).any(axis=1))
        s = np.where(known[:, None], rw.samples, 1.0)
        # "never" (inf) read as the largest float: quantiles among them stay huge, not nan
        q10, q50, q90 = np.quantile(np.minimum(s, 1e300), [0.1, 0.5, 0.9], axis=1)
        chance, _ = finish_chances(s, *args)
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.abs(np.log(q50 / truth))
        inside = (q10 <= truth) & (truth <= q90)
        p_cap = chance[np.arange(len(tasks)), wl.cap[tasks]]
        for i in np.flatnonzero(np.isfinite(truth) & (truth > 0)):
            rows.append((name, reports[i], known[i], error[i], inside[i], p_cap[i], at_cap[i]))


def main() -> None:
    """Parse the arguments, play the episodes and print the table."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=6, help="episodes per load (default 6)")
    p.add_argument("--loads", default="1.0,2.0", help="load factors (default 1.0,2.0)")
    p.add_argument("--split", default="val", help="trace split (default val)")
    args = p.parse_args()
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    traces = load_traces(split=args.split)
    sources, rows = Sources(), []
    for load in (float(v) for v in args.loads.split(",")):
        config = ClusterConfig(split=args.split, load=load)
        for i in range(args.episodes):
            seed = episode_seed(0, load, i)
            sim, hedge = ClusterSim(config, traces), Hedge()
            sim.reset(np.random.default_rng(seed))
            hedge.reset(sim, np.random.default_rng([seed, 1]))
            sources.clear()
            while not sim.done:
                measure(sim, sources, rows)
                sim.tick(hedge.assign(sim))
    table = np.array([r[1:] for r in rows], np.float64)
    names = np.array([r[0] for r in rows])
    print(
        f"{args.split}, {args.episodes} episodes per load at loads {args.loads}, states hedge "
        "reaches; per active task and tick:"
    )
    print(
        f"{'source':9s} {'reports':>8s} {'n':>7s} {'predicted':>9s} {'|log err|':>9s} "
        f"{'in 10-90%':>9s} {'P(cap) said':>11s} {'P(cap) true':>11s}"
    )
    for name in ("flow", "deadline", "fused"):
        for lo, hi in BANDS:
            m = (names == name) & (table[:, 0] >= lo) & (table[:, 0] < hi)
            k = m & (table[:, 1] > 0)
            if not m.any():
                continue
            band = f"{lo}-{hi - 1}" if hi < 10**9 else f"{lo}+"
            line = (
                f"{name:9s} {band:>8s} {m.sum():7d} {k.sum() / m.sum():9.2f} "
                f"{np.median(table[k, 2]) if k.any() else np.nan:9.2f} "
                f"{table[k, 3].mean() if k.any() else np.nan:9.2f} "
                f"{table[k, 4].mean() if k.any() else np.nan:11.2f} "
                f"{table[k, 5].mean() if k.any() else np.nan:11.2f}"
            )
            print(line.replace("nan", "  -"))  # no prediction in the band


if __name__ == "__main__":
    main()
