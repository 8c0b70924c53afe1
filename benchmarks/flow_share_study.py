"""How should a scheduler use remaining-work predictions?  (validation split; prints a table)

How to run:   python benchmarks/flow_share_study.py [--episodes 30] [--loads 1.0,2.0]

Compares, on the same episodes (common random numbers, base seed 0):

* ``uniform`` share and ``flow_share`` over a small grid of its quantile and slack
  (how its defaults were chosen, without the triage: ``drop=0``), and with the triage;
* LARA's deadline planner fed the **true** remaining work times a fixed log-normal error
  per task (sigma 0, 0.3, 0.7): how accurate a point prediction must be for planning;
* LARA's planner fed the flow predictor's median after 3 reports.

Results to expect: ``docs/baselines.md`` (section flow_share).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from mara_agents.baselines import LARA
from mara_agents.registry import make_scheduler
from mara_agents.runner import episode_seed
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, run_episode
from mara_env.traces import load_traces


class NoisyOracle(LARA):
    """LARA's planner on the true remaining work times exp(sigma * z), z fixed per task."""

    def __init__(self, sigma: float) -> None:
        super().__init__(explore_reports=0, margin=0.0)
        self.sigma = sigma

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.factor = np.exp(self.sigma * rng.standard_normal(len(sim.status)))

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        return sim.remaining_true(tasks) * self.factor[tasks]


class FlowPlanner(LARA):
    """LARA's planner on a quantile of the flow predictor (after ``explore`` reports)."""

    def __init__(self, quantile: float, explore: int = 3) -> None:
        super().__init__(explore_reports=explore, margin=0.0)
        from flow_predictor.checkpoint import load_predictor
        from flow_predictor.remaining import PredictionCache

        self.quantile = quantile
        self.cache = PredictionCache(load_predictor(n_samples=32), refresh=0.1)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.cache.clear()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        rw = self.cache.get(sim, tasks)
        return np.nan_to_num(rw.quantiles([self.quantile])[:, 0], nan=np.inf)


def candidates() -> dict[str, Scheduler]:
    out: dict[str, Scheduler] = {"uniform": make_scheduler("uniform")}
    # the grid that chose quantile and slack was run without the triage (drop=0)
    for q, slack in ((0.8, 3), (0.9, 2), (0.95, 4)):
        out[f"flow_share q={q} slack={slack} drop=0"] = make_scheduler(
            f"flow_share:quantile={q}:slack={slack}:drop=0"
        )
    out["flow_share (WLS predictions) drop=0"] = make_scheduler("flow_share:predictor=wls:drop=0")
    for drop in (0.05, 0.1):
        out[f"flow_share drop={drop} (0.05: default)"] = make_scheduler(f"flow_share:drop={drop}")
    for sigma in (0.0, 0.3, 0.7):
        out[f"planner on true work x lognormal({sigma})"] = NoisyOracle(sigma)
    out["planner on flow q50"] = FlowPlanner(0.5)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=30, help="episodes per load")
    p.add_argument("--loads", default="1.0", help="comma-separated load factors")
    p.add_argument("--split", default="val", help="trace split (never tune on test)")
    args = p.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    traces = load_traces(split=args.split)
    rows = []
    for name, sched in candidates().items():
        t0 = time.perf_counter()
        for load in loads:
            cfg = ClusterConfig(split=args.split).replace(load=load)
            for i in range(args.episodes):
                m = run_episode(sched, cfg, traces, episode_seed(0, load, i))
                rows.append({"scheduler": name, "load": load, "episode": i, **m})
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    rate = df.pivot_table(index="scheduler", columns="load", values="completion_rate", sort=False)
    base = df[df.scheduler == "uniform"].set_index(["load", "episode"])["completion_rate"]
    diff = (
        df.set_index(["load", "episode"])["completion_rate"]
        - base.reindex(df.set_index(["load", "episode"]).index).to_numpy()
    )
    df["vs_uniform"] = diff.to_numpy()
    half = df.groupby(["scheduler", "load"], sort=False)["vs_uniform"].agg(
        lambda v: 1.96 * v.std(ddof=1) / np.sqrt(len(v))
    )
    mean = df.groupby(["scheduler", "load"], sort=False)["vs_uniform"].mean()
    print(f"\ncompletion rate, split {args.split!r}, {args.episodes} episodes per load")
    print(rate.round(3).to_string())
    print("\npaired difference vs uniform (mean ± 95% half-width)")
    table = (mean.map("{:+.3f}".format) + " ± " + half.map("{:.3f}".format)).unstack("load")
    print(table.to_string())


if __name__ == "__main__":
    main()
