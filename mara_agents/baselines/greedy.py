"""Greedy rules fed by a fitted curve: least slack first (LARA's WLS fit) and Optimus'
marginal gain (Peng et al., EuroSys 2018)."""

from __future__ import annotations

import numpy as np

from flow_predictor.remaining import PredictionCache, RemainingWork
from mara_agents.baselines.lara import WLSScheduler, explore_counts
from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler, edf_order, spread, ticks_needed, warm_nodes


class LeastSlack(WLSScheduler):
    """Least slack first: slack = time to deadline - predicted ticks at the cap (WLS).

    Tasks with non-negative slack get their cap in slack order, then the others; new
    tasks first explore exactly as under LARA.
    """

    name = "least_slack"

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        counts = explore_counts(sim, order, self.explore_reports)
        rest = order[counts[order] == 0]
        wl = sim.workload
        ticks = ticks_needed(
            self.predictor.remaining(sim, rest),
            wl.cap[rest],
            warm_nodes(sim, rest),
            wl.rate[rest],
            wl.alpha[rest],
        )
        slack = wl.deadline[rest] - sim.t - ticks
        rank = np.lexsort((slack, slack < 0))
        left = sim.config.num_nodes - int(counts.sum())
        for k in rest[rank]:
            if left <= 0:
                break
            counts[k] = min(int(wl.cap[k]), left)
            left -= counts[k]
        return counts


def _optimus_fit(sim: ClusterSim, tasks: np.ndarray) -> tuple[RemainingWork, np.ndarray]:
    """Optimus' remaining work of ``tasks``, counted from their work now: the work done
    between a fit and the next one counts against the predicted remaining work."""
    from flow_predictor.optimus import OptimusPredictor  # scipy, only when Optimus runs

    pred = OptimusPredictor().predict(
        [np.asarray(sim.hist_work[k]) for k in tasks],
        [np.asarray(sim.hist_loss[k]) for k in tasks],
        sim.workload.target[tasks],
    )
    return pred, sim.work[tasks]


class Optimus(Scheduler):
    """Optimus-style greedy marginal gain (Peng et al., EuroSys 2018), deadline-blind.

    Remaining work from the ``1/(a w + b) + c`` fit of :mod:`flow_predictor.optimus`
    (refitted every ``refit_every`` reports; it is a nonlinear fit).  After LARA's
    exploration, every predictable task gets one node (shortest predicted remaining time
    first), then each further node goes to the task whose predicted remaining time
    ``R / (r n**alpha)`` (+1 tick if the node must warm up) drops the most.
    """

    name = "optimus"

    def __init__(self, explore_reports: int = 3, refit_every: int = 5) -> None:
        self.explore_reports = int(explore_reports)
        self.refit_every = max(int(refit_every), 1)
        # A fallback (too few reports) waits for the next refit like any other fit.
        self._fits = PredictionCache(_optimus_fit, every=self.refit_every, refit_fallbacks=False)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        self._fits.clear()

    def remaining(self, sim: ClusterSim, tasks: np.ndarray) -> np.ndarray:
        """Predicted remaining work (inf: never reaches its target by the fit)."""
        total = self._fits.totals(sim, tasks)[:, 0]
        return np.maximum(np.nan_to_num(total, nan=np.inf) - sim.work[tasks], 0.0)

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        counts = explore_counts(sim, order, self.explore_reports)
        rest = order[counts[order] == 0]
        left = sim.config.num_nodes - int(counts.sum())
        if not len(rest) or left <= 0:
            return counts
        wl = sim.workload
        rem = self.remaining(sim, rest)
        warm = warm_nodes(sim, rest)
        rate, alpha, cap = wl.rate[rest], wl.alpha[rest], wl.cap[rest]

        def time_left(n: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                return rem / (rate * np.maximum(n, 1) ** alpha) + (n > warm)

        n = np.zeros(len(rest), np.int64)
        finite = np.isfinite(rem)
        for i in np.flatnonzero(finite)[np.argsort(time_left(np.ones(len(rest)))[finite])]:
            if left <= 0:
                break
            n[i], left = 1, left - 1
        while left > 0:
            gain = np.where(finite & (n > 0) & (n < cap), time_left(n) - time_left(n + 1), -np.inf)
            i = int(np.argmax(gain))
            if not np.isfinite(gain[i]):
                break
            n[i] += 1
            left -= 1
        spread(n, cap, left)
        counts[rest] = n
        return counts
