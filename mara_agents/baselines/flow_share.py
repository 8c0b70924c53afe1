"""flow_share: uniform share, but no task gets more nodes than it confidently needs.

The rule (:mod:`mara_agents.planning.share_rule`) as a scheduler, with the shipped flow
model, LARA's WLS fit or each task's exact remaining work as its predictor.  Numpy only: the flow
model (torch) is loaded only by ``FlowShare(predictor="flow")``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import numpy as np

from flow_predictor.remaining import FLOW_SAMPLES, MIN_REPORTS, PredictionCache, RemainingWork
from mara_agents.planning.predictors import EXACT, check_predictor
from mara_agents.planning.share_rule import FlowShareParams, flow_share_counts
from mara_env.cluster import ClusterSim
from mara_env.schedulers import Scheduler, edf_order

if TYPE_CHECKING:
    from flow_predictor.flow import FlowPredictor

PREDICTORS = ("flow", "wls", EXACT)


class TrueRemaining:
    """Same interface as :class:`flow_predictor.remaining.PredictionCache`, answering with
    each task's true remaining work (one sample) once it has ``MIN_REPORTS`` reports;
    before that the task is a fallback (unknown), exactly as for the flow model."""

    def clear(self) -> None:
        """Nothing to forget (stateless)."""

    def get(self, sim: ClusterSim, tasks: np.ndarray) -> RemainingWork:
        """Remaining work of ``tasks`` from their current work on."""
        tasks = np.asarray(tasks, np.int64)
        fallback = np.array([len(sim.hist_work[k]) < MIN_REPORTS for k in tasks], bool)
        true = np.where(fallback, np.nan, sim.remaining_true(tasks))
        return RemainingWork(true[:, None], fallback)


class FlowShare(Scheduler):
    """The flow_share rule (this module's docstring) as a scheduler.

    ``quantile``, ``slack``, ``drop`` (0: no triage) and ``refresh``: see
    :class:`~mara_agents.planning.share_rule.FlowShareParams` (None: its default; with the
    defaults, the policy's ``pred_nodes_needed`` and ``pred_share`` features are this
    scheduler's want and count).
    ``predictor``: ``"flow"`` (the shipped checkpoint,
    :data:`~flow_predictor.remaining.FLOW_SAMPLES` samples), ``"wls"``, or ``"exact"``:
    each task's exact remaining work once it has as many reports as the flow model needs
    (a reference for how much better predictions could gain: same exploration, same
    rule).  ``checkpoint``: with
    ``predictor="flow"``, a flow checkpoint of your own instead of the shipped one
    (``flow_share:checkpoint=runs/predictor/flow.pt``).
    """

    name = "flow_share"

    def __init__(
        self,
        quantile: float | None = None,
        slack: int | None = None,
        predictor: str = "flow",
        refresh: float | None = None,
        drop: float | None = None,
        checkpoint: str | None = None,
    ) -> None:
        given = {"quantile": quantile, "slack": slack, "refresh": refresh, "drop": drop}
        self.params = FlowShareParams(**{k: v for k, v in given.items() if v is not None})
        self._flow: FlowPredictor | None = None  # a flow model of the user's own checkpoint
        check_predictor("flow_share", predictor, PREDICTORS)
        # Checked here, in the parent process, not in a worker after other work; the CLI
        # turns this error into the line naming the extra to install.
        for module in ("torch", "threadpoolctl", "numba") if predictor == "flow" else ():
            if importlib.util.find_spec(module) is None:
                msg = f"flow_share: predictor='flow' needs {module}"
                raise ModuleNotFoundError(msg, name=module)
        if checkpoint is not None:
            if predictor != "flow":
                raise ValueError(
                    f"flow_share: checkpoint={checkpoint!r} with predictor={predictor!r}; "
                    "expected predictor 'flow' (a checkpoint is a flow model)"
                )
            from flow_predictor.checkpoint import load_predictor

            # loaded once, here: a missing or foreign file fails at construction, by name
            self._flow = load_predictor(checkpoint, n_samples=FLOW_SAMPLES)
        self.predictor = predictor
        self._predictions: PredictionCache | TrueRemaining | None = None

    def _make_predictions(self) -> PredictionCache | TrueRemaining:
        if self.predictor == EXACT:
            return TrueRemaining()
        if self.predictor == "flow":
            from flow_predictor.checkpoint import load_predictor

            flow = self._flow or load_predictor(n_samples=FLOW_SAMPLES)
            return PredictionCache(flow, self.params.refresh)
        from flow_predictor.wls import WLSPredictor

        return PredictionCache(WLSPredictor(), self.params.refresh)

    def reset(self, sim: ClusterSim, rng: np.random.Generator) -> None:
        super().reset(sim, rng)
        if self._predictions is None:
            self._predictions = self._make_predictions()
        self._predictions.clear()

    def allocate(self, sim: ClusterSim) -> np.ndarray:
        order = edf_order(sim)
        counts = np.zeros(len(sim.status), np.int64)
        if len(order):
            counts[order] = self.counts(sim, order, self._predictions.get(sim, order))
        return counts

    def counts(self, sim: ClusterSim, order: np.ndarray, rw: RemainingWork) -> np.ndarray:
        """Nodes for each task of ``order`` (active tasks, deadline order), whose
        predictions are ``rw``: :func:`flow_share_counts` with this scheduler's parameters
        (the one place a variant of the rule changes)."""
        p = self.params
        return flow_share_counts(sim, order, rw, p.quantile, p.slack, p.drop or None)[1]
