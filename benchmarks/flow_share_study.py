"""How should a scheduler use remaining-work predictions?  (validation split; prints a table)

How to run:   python benchmarks/flow_share_study.py [--study rule|room] [--episodes 30]
                  [--loads 1.0,2.0] [--workers 2]

``--study rule`` (the default) compares, on the same episodes (common random numbers,
base seed 0):

* ``uniform`` share and ``flow_share`` over a small grid of its quantile and slack
  (how its defaults were chosen, without the triage: ``drop=0``), and with the triage;
* LARA's deadline planner fed the **true** remaining work times a fixed log-normal error
  per task (sigma 0, 0.3, 0.7): how accurate a point prediction must be for planning;
* LARA's planner fed the flow predictor's median after 3 reports.

``--study room`` asks where ``flow_share`` loses to the same rule on exact remaining work
(``flow_share:predictor=exact``), and whether changes within reach recover any of it:

* exact remaining work for the *want* only (the 90 % quantile) or for the *triage* only
  (the 5 % quantile), the flow predictor's for the other;
* 64 flow samples instead of 32; predicting again at every report (``refresh=0``);
* under contention (the wants exceed the cluster), wants from a lower quantile;
* the flow predictor's samples re-weighted by what the deadline says about the task's
  size (deadline-informed predictions, below), with the rule's quantile 0.8 / 0.9 / 0.95.
  ``--accuracy N`` also prints how much closer these predictions are than the flow
  predictor's, by number of reports, on N episodes at the first load.

*Deadline-informed predictions.* Users set a deadline from their own rough estimate of
the task's size (``docs/architecture.md``: ``slack x estimate``), so ``log(total work)
- log((deadline - arrival) x rate x n_ref^alpha)`` has one distribution over tasks. It is
estimated here from 200 workloads drawn on the **train** split (a platform would estimate
it from its own job history), and each flow sample of a task's total work is weighted by
that density at its residual; the weighted quantiles replace the samples.

Results to expect: ``docs/baselines.md`` (section flow_share) and ``docs/training.md``
("Where load 1 stands").
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from multiprocessing import Pool

import numpy as np
import pandas as pd

from flow_predictor.remaining import FLOW_SAMPLES, PredictionCache, RemainingWork
from mara_agents.baselines import LARA
from mara_agents.baselines.flow_share import FlowShare, TrueRemaining
from mara_agents.evaluation.registry import make_scheduler
from mara_agents.evaluation.runner import episode_seed
from mara_agents.planning.share_rule import flow_share_counts
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.schedulers import Scheduler, edf_order, run_episode
from mara_env.traces import load_traces
from mara_env.workload import sample_workload


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
        self.cache = PredictionCache(load_predictor(n_samples=FLOW_SAMPLES), refresh=0.1)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self.cache.clear()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        rw = self.cache.get(sim, tasks)
        return np.nan_to_num(rw.quantiles([self.quantile])[:, 0], nan=np.inf)


class FlowShareVariant(FlowShare):
    """``flow_share`` with one change to its predictions or its want (see the study).

    ``samples``: flow samples per task (the shipped rule's ``FLOW_SAMPLES``).
    ``contended``: when the wants exceed the cluster, take them from this quantile instead.
    ``deadline``: weight the samples by the deadline's density (:class:`DeadlineWeighted`).
    ``want`` / ``triage``: ``"flow"`` or ``"exact"`` (true remaining work) for the quantile
    each uses.
    """

    def __init__(
        self,
        samples: int = FLOW_SAMPLES,
        contended: float | None = None,
        deadline: bool = False,
        want: str = "flow",
        triage: str = "flow",
        **params: float,
    ) -> None:
        super().__init__(**params)
        self.samples, self.contended, self.deadline = samples, contended, deadline
        self.sources = {"want": want, "triage": triage}
        self.exact = TrueRemaining()

    def _make_predictions(self) -> PredictionCache | DeadlineWeighted:
        from flow_predictor.checkpoint import load_predictor

        cache = PredictionCache(load_predictor(n_samples=self.samples), self.params.refresh)
        return DeadlineWeighted(cache) if self.deadline else cache

    def counts(self, sim: ClusterSim, order: np.ndarray, rw: RemainingWork) -> np.ndarray:
        p = self.params
        exact = self.exact.get(sim, order)
        src = {"flow": rw, "exact": exact}
        qs = {p.quantile: src[self.sources["want"]].quantiles([p.quantile])[:, 0]}
        if p.drop:
            qs[p.drop] = src[self.sources["triage"]].quantiles([p.drop])[:, 0]
        rw = RemainingWork(rw.samples, rw.fallback | exact.fallback)
        drop = p.drop or None
        want, counts = flow_share_counts(sim, order, rw, p.quantile, p.slack, drop, qs=qs)
        if self.contended is not None and want.sum() > sim.config.num_nodes:
            _, counts = flow_share_counts(sim, order, rw, self.contended, p.slack, drop)
        return counts


def deadline_residuals(episodes: int = 200, seed: int = 10_000) -> np.ndarray:
    """``log(true work) - log((deadline - arrival) * rate * n_ref**alpha)`` of the tasks of
    ``episodes`` workloads drawn on the **train** split (finite ones), sorted."""
    cfg = ClusterConfig(split="train")
    traces = load_traces(cfg.traces, split="train")
    out = []
    for e in range(episodes):
        wl = sample_workload(cfg, traces, np.random.default_rng(seed + e))
        span = (wl.deadline - wl.arrival) * wl.rate * np.minimum(wl.cap, cfg.ref_nodes) ** wl.alpha
        with np.errstate(divide="ignore"):
            r = np.log(wl.work_true) - np.log(span)
        out.append(r[np.isfinite(r)])
    return np.sort(np.concatenate(out))


class DeadlineWeighted:
    """A prediction cache whose samples are re-weighted by the deadline's evidence.

    Each sample ``s`` of a task's remaining work is a total ``done + s``; its weight is the
    density (Gaussian kernel, bandwidth 0.15) of :func:`deadline_residuals` at
    ``log(total) - log(span)``, plus a floor of 1e-3 so no task loses every sample.  The
    new samples are the weighted quantiles at the levels ``(i + 0.5) / n``; a sample that
    never reaches the target (``inf``) keeps its mass above the finite ones.
    """

    _density: tuple[np.ndarray, np.ndarray] | None = None

    def __init__(self, inner: PredictionCache, floor: float = 1e-3) -> None:
        self.inner, self.floor = inner, floor

    @classmethod
    def density(cls) -> tuple[np.ndarray, np.ndarray]:
        if cls._density is None:
            r = deadline_residuals()
            grid = np.linspace(r[0] - 1, r[-1] + 1, 400)
            dens = np.exp(-0.5 * ((grid[:, None] - r[None, ::10]) / 0.15) ** 2).sum(axis=1)
            cls._density = (grid, dens / dens.max())
        return cls._density

    def clear(self) -> None:
        self.inner.clear()

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        rw = self.inner.get(sim, tasks)
        grid, dens = self.density()
        wl, out = sim.workload, rw.samples.copy()
        levels = (np.arange(out.shape[1]) + 0.5) / out.shape[1]
        for i, k in enumerate(np.asarray(tasks)):
            if rw.fallback[i] or np.isnan(rw.samples[i]).any():
                continue
            done = float(sim.work[k])
            total = np.sort(done + rw.samples[i])
            span = (wl.deadline[k] - wl.arrival[k]) * wl.rate[k]
            span *= min(wl.cap[k], sim.config.ref_nodes) ** wl.alpha[k]
            finite = np.isfinite(total)
            if finite.sum() < 2:
                continue
            w = np.full(len(total), self.floor)
            w[finite] += np.interp(np.log(total[finite] / span), grid, dens, left=0, right=0)
            cum = (np.cumsum(w) - 0.5 * w) / w.sum()
            q = np.interp(levels, cum[finite], total[finite])
            q[levels > cum[finite][-1]] = np.inf if (~finite).any() else q[-1]
            out[i] = np.maximum(q - done, 0.0)
        return RemainingWork(out, rw.fallback)


def candidates(study: str) -> dict[str, Callable[[], Scheduler]]:
    """The schedulers of one study, by name (each built only when it runs)."""
    out: dict[str, Callable[[], Scheduler]] = {"uniform": lambda: make_scheduler("uniform")}
    if study == "room":
        out["flow_share (shipped)"] = lambda: make_scheduler("flow_share")
        out["flow_share:predictor=exact (exact work)"] = lambda: make_scheduler(
            "flow_share:predictor=exact"
        )
        out["exact work for the want only"] = lambda: FlowShareVariant(want="exact")
        out["exact work for the triage only"] = lambda: FlowShareVariant(triage="exact")
        out["64 flow samples"] = lambda: FlowShareVariant(samples=64)
        out["predict at every report (refresh=0)"] = lambda: make_scheduler("flow_share:refresh=0")
        for q in (0.5, 0.7):
            out[f"wants from q={q} under contention"] = lambda q=q: FlowShareVariant(contended=q)
        for q in (0.8, 0.9, 0.95):
            out[f"deadline-informed, quantile {q}"] = lambda q=q: FlowShareVariant(
                deadline=True, quantile=q
            )
        return out
    # the grid that chose quantile and slack was run without the triage (drop=0)
    for q, slack in ((0.8, 3), (0.9, 2), (0.95, 4)):
        out[f"flow_share q={q} slack={slack} drop=0"] = lambda q=q, slack=slack: make_scheduler(
            f"flow_share:quantile={q}:slack={slack}:drop=0"
        )
    out["flow_share (WLS predictions) drop=0"] = lambda: make_scheduler(
        "flow_share:predictor=wls:drop=0"
    )
    for drop in (0.05, 0.1):
        out[f"flow_share drop={drop} (0.05: default)"] = lambda drop=drop: make_scheduler(
            f"flow_share:drop={drop}"
        )
    for sigma in (0.0, 0.3, 0.7):
        out[f"planner on true work x lognormal({sigma})"] = lambda sigma=sigma: NoisyOracle(sigma)
    out["planner on flow q50"] = lambda: FlowPlanner(0.5)
    return out


def run_job(job: tuple[str, str, float, int, str]) -> list[dict]:
    """Episodes ``0 .. episodes-1`` (base seed 0) of one scheduler of ``study`` at ``load``."""
    study, name, load, episodes, split = job
    sched = candidates(study)[name]()
    cfg = ClusterConfig(split=split).replace(load=load)
    traces = load_traces(cfg.traces, split=split)
    rows = []
    for i in range(episodes):
        m = run_episode(sched, cfg, traces, episode_seed(0, load, i))
        rows.append({"scheduler": name, "load": load, "episode": i, **m})
    return rows


def accuracy(episodes: int, load: float, split: str) -> pd.DataFrame:
    """Median |log(predicted median / true remaining work)|, 80 % coverage and width of
    the flow predictor's and the deadline-informed predictions, on the states the shipped
    ``flow_share`` reaches, by the task's number of reports."""
    records = []

    class Probe(FlowShare):
        def allocate(self, sim: ClusterSim) -> np.ndarray:
            order = edf_order(sim)
            if len(order):
                flow = self._predictions.get(sim, order)
                informed = DeadlineWeighted(self._predictions).get(sim, order)
                true = sim.remaining_true(order)
                for name, rw in (("flow", flow), ("deadline-informed", informed)):
                    q = rw.quantiles([0.1, 0.5, 0.9])
                    ok = ~rw.fallback & np.isfinite(true) & (true > 0) & np.isfinite(q[:, 1])
                    for i in np.flatnonzero(ok):
                        k = order[i]
                        records.append(
                            {
                                "predictions": name,
                                "reports": len(sim.hist_work[k]),
                                "abs_log_error": abs(np.log(q[i, 1] / true[i])),
                                "covered80": q[i, 0] <= true[i] <= q[i, 2],
                                "log_width80": np.log(q[i, 2] / q[i, 0]),
                            }
                        )
            return super().allocate(sim)

    cfg = ClusterConfig(split=split).replace(load=load)
    traces = load_traces(cfg.traces, split=split)
    for i in range(episodes):
        run_episode(Probe(), cfg, traces, episode_seed(0, load, i))
    df = pd.DataFrame(records)
    df["reports"] = pd.cut(
        df["reports"], [2, 5, 10, 20, 10_000], labels=["3-5", "6-10", "11-20", ">20"]
    )
    return df.groupby(["reports", "predictions"], observed=True).agg(
        median_abs_log_error=("abs_log_error", "median"),
        coverage80=("covered80", "mean"),
        median_log_width80=("log_width80", "median"),
        n=("abs_log_error", "size"),
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--study",
        choices=("rule", "room"),
        default="rule",
        help="rule: how flow_share's defaults were chosen (default); room: what exact "
        "remaining work would gain and what recovers it (see above)",
    )
    p.add_argument("--episodes", type=int, default=30, help="episodes per load")
    p.add_argument("--loads", default="1.0", help="comma-separated load factors")
    p.add_argument("--split", default="val", help="trace split (never tune on test)")
    p.add_argument("--workers", type=int, default=1, help="processes (one scheduler x load each)")
    p.add_argument(
        "--accuracy",
        type=int,
        default=0,
        metavar="N",
        help="room study: also the prediction accuracy on N episodes at the first load",
    )
    args = p.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    names = list(candidates(args.study))
    jobs = [(args.study, name, load, args.episodes, args.split) for name in names for load in loads]
    t0 = time.perf_counter()
    with Pool(args.workers) as pool:
        rows = [r for part in pool.imap(run_job, jobs) for r in part]
    print(f"{len(jobs)} scheduler x load runs in {time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    rate = df.pivot_table(index="scheduler", columns="load", values="completion_rate", sort=False)
    reference = "flow_share (shipped)" if args.study == "room" else "uniform"
    key = ["load", "episode"]
    base = df[df.scheduler == reference].set_index(key)["completion_rate"]
    df["diff"] = df["completion_rate"].to_numpy() - base.reindex(df.set_index(key).index).to_numpy()
    half = df.groupby(["scheduler", "load"], sort=False)["diff"].agg(
        lambda v: 1.96 * v.std(ddof=1) / np.sqrt(len(v))
    )
    mean = df.groupby(["scheduler", "load"], sort=False)["diff"].mean()
    print(f"\ncompletion rate, split {args.split!r}, {args.episodes} episodes per load")
    print(rate.round(3).to_string())
    print(f"\npaired difference vs {reference} (mean ± 95% half-width)")
    table = (mean.map("{:+.3f}".format) + " ± " + half.map("{:.3f}".format)).unstack("load")
    print(table.to_string())
    if args.study == "room" and args.accuracy:
        print(f"\nprediction accuracy, {args.accuracy} episodes at load {loads[0]}")
        print(accuracy(args.accuracy, loads[0], args.split).round(2).to_string())


if __name__ == "__main__":
    main()
