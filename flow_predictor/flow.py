"""The flow-matching remaining-work predictor: featurise, sample trajectories, read crossings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import torch

from flow_predictor.features import LOG_RATIOS, crossing_row, decode_target, prefix_conditions
from flow_predictor.model import FlowConfig, Sampler, VelocityNet
from flow_predictor.remaining import (
    FLOW_SAMPLES,
    LOSS_FLOOR,
    MIN_REPORTS,
    FittedPrefixes,
    RemainingWork,
    RemainingWorkPredictor,
    current_work,
)
from flow_predictor.wls import WLSFit, WLSPredictor


@dataclass(frozen=True)
class Normalisation:
    """Per-dimension affine normalisation of conditions and targets (from the train split)."""

    cond_mean: np.ndarray
    cond_std: np.ndarray
    target_mean: np.ndarray
    target_std: np.ndarray

    def to_dict(self) -> dict[str, list[float]]:
        """Plain lists for the checkpoint header."""
        return {k: np.asarray(v, np.float64).tolist() for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict[str, list[float]]) -> Normalisation:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: np.asarray(d[k], np.float32) for k in cls.__dataclass_fields__})


def sobol_normal(n: int, dim: int, seed: int) -> torch.Tensor:
    """``n`` scrambled-Sobol standard-normal points: low-variance quantiles from few samples."""
    u = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed).draw(n).double()
    u = u.clamp(0.5 / n, 1 - 0.5 / n)
    return (torch.erfinv(2 * u - 1) * np.sqrt(2.0)).float()


@numba.njit(cache=True, error_model="numpy")
def _widen(ratio: np.ndarray, spread: float) -> None:
    """Scale one row's finite log-samples about their median by ``spread``, in place.

    ``inf`` ("not reached") samples stay ``inf``; results stay within the model's grid.
    """
    logs = np.log(ratio)
    ordered = np.sort(logs)  # inf sorts last, as "not reached" should
    med = ordered[(len(logs) - 1) // 2]
    if not np.isfinite(med):  # mostly "never": widen about the largest finite sample
        med = -np.inf
        for v in logs:
            if np.isfinite(v):
                med = max(med, v)
    lo, hi = LOG_RATIOS[0], LOG_RATIOS[-1]
    for s in range(len(ratio)):
        if np.isfinite(ratio[s]):
            ratio[s] = np.exp(min(max(med + spread * (logs[s] - med), lo), hi))


@numba.njit(cache=True, error_model="numpy")
def _read_out(
    traj: np.ndarray,
    rows: np.ndarray,
    delta: np.ndarray,
    current: np.ndarray,
    spread: float,
    out: np.ndarray,
) -> None:
    """Remaining-work samples of trajectories ``traj[rows[j]]`` for relative log targets
    ``delta[j]``: crossings, widened by ``spread``, times the current work, into ``out[j]``."""
    for j in range(len(rows)):
        r = rows[j]
        for s in range(traj.shape[1]):
            out[j, s] = crossing_row(traj[r, s], delta[j])
        if spread != 1.0:
            _widen(out[j], spread)
        out[j] *= current[r]


@dataclass(frozen=True)
class FlowFit(FittedPrefixes):
    """Sampled future trajectories of a batch of prefixes (WLS where too short)."""

    traj: np.ndarray  # (n_tasks, n_samples, TARGET_DIM) relative log-loss; nan rows: fallback
    ref: np.ndarray  # (n_tasks,) lowest log-loss so far
    wls: WLSFit | None  # fits of the fallback tasks with two reports (None: there are none)
    current: np.ndarray
    fallback: np.ndarray
    spread: float = 1.0
    # each task's row in ``wls`` (-1: none, a task with fewer than two reports: unknown)
    wls_row: np.ndarray | None = None

    def remaining(self, targets: np.ndarray, tasks: np.ndarray | None = None) -> RemainingWork:
        """Remaining-work samples (``inf``: not reached within 24x the current work; nan:
        unknown)."""
        k = self._tasks(targets, tasks)
        eps = np.asarray(targets, np.float64)
        fb = self.fallback[k]
        flow = np.flatnonzero(~fb)  # rows are independent: read out only the flow's
        shape = (len(k), self.traj.shape[1])
        out = np.empty(shape) if len(flow) == len(k) else np.full(shape, np.nan)
        if len(flow):
            kf = k[flow]
            delta = np.log(np.maximum(eps[flow], LOSS_FLOOR)) - self.ref[kf]
            part = out if len(flow) == len(k) else np.empty((len(flow), self.traj.shape[1]))
            _read_out(self.traj, kf, delta, self.current, float(self.spread), part)
            if part is not out:
                out[flow] = part
        if self.wls is not None:  # the fallbacks with two reports
            row = self.wls_row[k]
            fit = np.flatnonzero(row >= 0)
            if len(fit):
                out[fit] = self.wls.remaining(eps[fit], row[fit]).samples
        return RemainingWork(samples=out, fallback=fb)


class FlowPredictor(RemainingWorkPredictor):
    """Remaining-work distribution from sampled future loss trajectories.

    ``spread`` widens (> 1) or narrows the samples' log remaining work about their median;
    training calibrates it on the validation split so 80 % intervals cover ~80 %.
    Sampling is deterministic: a fixed noise tensor (``n_samples`` scrambled-Sobol
    normal points from ``seed``) is pushed through the flow for every task, so a task's
    prediction depends only on its own reports.  Prefixes with fewer than
    :data:`MIN_REPORTS` reports fall back to WLS (``fallback=True``).
    """

    name = "flow"
    unknown_below = 2  # its fallback, WLS, needs two reports

    def __init__(
        self,
        net: VelocityNet,
        norm: Normalisation,
        n_samples: int = FLOW_SAMPLES,
        steps: int = 4,
        method: str = "euler",
        seed: int = 0,
        spread: float = 1.0,
    ) -> None:
        self.net = net.eval()
        self.norm = norm
        self.spread = spread
        self.sampler = Sampler(net, steps, method)
        self.noise = sobol_normal(n_samples, net.config.target_dim, seed).numpy()

    @property
    def config(self) -> FlowConfig:
        """Sizes of the velocity network."""
        return self.net.config

    def trajectories(self, cond: np.ndarray) -> np.ndarray:
        """(B, n_samples, target_dim) sampled relative log-loss trajectories."""
        n = self.norm
        x = self.sampler((cond - n.cond_mean) / n.cond_std, self.noise)
        return decode_target(x, n.target_std, n.target_mean)

    def fit(self, works: Sequence[np.ndarray], losses: Sequence[np.ndarray]) -> FlowFit:
        """Sample every prefix's future (one batched ODE solve)."""
        return self.fit_batches([(works, losses)])

    def fit_batches(
        self, batches: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]]
    ) -> FlowFit:
        """:meth:`fit` of several batches' prefixes in one ODE solve, each batch featurised
        as alone (its prefixes aligned on its longest: :func:`prefix_conditions`)."""
        works = [w for batch in batches for w in batch[0]]
        losses = [v for batch in batches for v in batch[1]]
        sizes = [len(w) for w in works]
        fallback = np.array(sizes, np.int64) < MIN_REPORTS
        idx = np.flatnonzero(~fallback)
        if len(idx):
            per_batch = [sum(len(w) >= MIN_REPORTS for w in batch[0]) for batch in batches]
            cond, flow_ref = prefix_conditions(
                [works[i] for i in idx], [losses[i] for i in idx], [c for c in per_batch if c]
            )
            flow_traj = self.trajectories(cond)
        if len(idx) == len(works):  # no fallback: the flow's rows are all the rows
            traj, ref = flow_traj.astype(np.float64), flow_ref
        else:
            shape = (len(works), self.noise.shape[0], self.net.config.target_dim)
            traj, ref = np.full(shape, np.nan), np.full(len(works), np.nan)
            if len(idx):
                traj[idx], ref[idx] = flow_traj, flow_ref
        # WLS for the fallbacks it can fit (two reports or more); fewer are unknown.  (With
        # MIN_REPORTS = 3 they have two each, so one's fit does not depend on the others.)
        short = [i for i, n in enumerate(sizes) if 2 <= n < MIN_REPORTS]
        wls, wls_row = None, None
        if short:
            wls_row = np.full(len(works), -1, np.int64)
            wls = WLSPredictor().fit([works[i] for i in short], [losses[i] for i in short])
            wls_row[short] = np.arange(len(short))
        return FlowFit(
            traj=traj,
            ref=ref,
            wls=wls,
            current=current_work(works),
            fallback=fallback,
            spread=self.spread,
            wls_row=wls_row,
        )
