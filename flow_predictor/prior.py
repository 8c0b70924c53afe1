"""A synthetic prior over learning curves, for pretraining the flow model (numpy only).

Prior-fitted networks (LC-PFN, Adriaensen et al., NeurIPS 2023) learn to extrapolate
learning curves from samples of a prior over parametric curve families alone.  This module
is our own such prior, written for *loss* curves (decreasing towards a floor) and for the
shapes our trace families show.  One curve is drawn in four stages:

1. **Base family** (:data:`FAMILIES`), a function of normalised work ``x = w / w_1 >= 1``
   (or ``u = w / w_end`` in (0, 1]) from the start loss ``top`` down towards a ``floor``:

   ======================  ==========================================================
   ``pow3``                ``floor + (top - floor) x^-a``
   ``ilog2``               ``floor + (top - floor) log(2) / log(x + 1)``
   ``janoschek``           ``floor + (top - floor) exp(-k (x - 1)^d)``
   ``weibull``             ``floor + (top - floor) exp(-(u / s)^d)`` (d < 1: slow tails)
   ``mmf``                 ``floor + (top - floor) / (1 + (k (x - 1))^d)`` (Morgan-Mercer-Flodin)
   ``exp3``                ``floor + (top - floor) exp(-k u)``
   ``optimus``             ``floor + 1 / (a (x - 1) + 1 / (top - floor))`` (Optimus' model)
   ``mixture``             a convex combination of two or three of the above
   ======================  ==========================================================

2. **Schedule effects** through *effective work* ``t(w) = ∫ lr`` (progress slows when the
   learning rate is small) and a noise floor that falls with the learning rate (loss
   scaled by ``exp(-g (1 - lr))``): ``warmup`` (linear ramp), ``step_decay`` (x0.1 drops at
   one or two milestones: sudden drops, then slower progress), ``cosine`` (a cosine tail).
3. **Shape effects** on log-loss: ``plateau`` (progress stalls for a while, then a
   breakthrough drop), ``divergence`` (the loss climbs away after some point), and, for
   RL-like curves, ``flat_start`` (no progress at first), ``jumps`` (sudden sigmoid drops)
   and ``non_monotone`` (temporary or lasting set-backs).
4. **Noise** on log-loss: ``gaussian``, ``heteroscedastic`` (larger early or at high loss)
   or ``heavy_tailed`` (Student-t with 1.5–5 degrees of freedom); RL-like curves are
   ``1 - normalised smoothed return``: noisy, moving-average smoothed, within (0, 1].

Every draw comes from one ``numpy.random.Generator``: the same seed gives the same curves.
:func:`sample_curves` returns :class:`Curve` objects (with the family and effects that made
each); :func:`prior_traces` returns them as a :class:`~mara_env.traces.TraceSet` (family
``prior``, source ``prior/<family>/<i>``) that training treats like any library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mara_env.traces import LOSS_FLOOR, TraceSet, validate_traces

FAMILIES = ("pow3", "ilog2", "janoschek", "weibull", "mmf", "exp3", "optimus", "mixture")
SCHEDULE_EFFECTS = ("warmup", "step_decay", "cosine")
SHAPE_EFFECTS = ("plateau", "divergence")
RL_EFFECTS = ("flat_start", "jumps", "non_monotone")
NOISES = ("gaussian", "heteroscedastic", "heavy_tailed")
EFFECTS = SCHEDULE_EFFECTS + SHAPE_EFFECTS + RL_EFFECTS + NOISES


@dataclass(frozen=True)
class PriorConfig:
    """Probabilities and ranges of the prior (defaults: broad, every effect common)."""

    n_points: tuple[int, int] = (40, 300)  # logged points per curve (uniform)
    log10_work: tuple[float, float] = (1.5, 5.5)  # total work of a curve, log10-uniform
    top: tuple[float, float] = (0.05, 10.0)  # start loss, log-uniform
    floor_fraction: tuple[float, float] = (0.001, 0.95)  # floor / start, log-uniform
    rl_share: float = 0.25  # share of RL-like curves (returns-based, in (0, 1])
    effect_prob: dict[str, float] = field(
        default_factory=lambda: {
            "warmup": 0.25,
            "step_decay": 0.2,
            "cosine": 0.25,
            "plateau": 0.15,
            "divergence": 0.05,
            "flat_start": 0.5,  # of RL-like curves
            "jumps": 0.5,  # of RL-like curves
            "non_monotone": 0.4,  # of RL-like curves
        }
    )
    noise_prob: dict[str, float] = field(
        default_factory=lambda: {"gaussian": 0.4, "heteroscedastic": 0.35, "heavy_tailed": 0.25}
    )

    def __post_init__(self) -> None:
        for name, (lo, hi) in {
            "n_points": self.n_points,
            "log10_work": self.log10_work,
            "top": self.top,
            "floor_fraction": self.floor_fraction,
        }.items():
            if not 0 < lo <= hi:
                raise ValueError(f"prior: {name}=({lo}, {hi}); expected 0 < low <= high")
        if self.n_points[0] < 10:
            raise ValueError(f"prior: n_points={self.n_points}; expected at least 10 points")
        if self.floor_fraction[1] >= 1:
            raise ValueError(f"prior: floor_fraction={self.floor_fraction}; expected high < 1")
        probs = {**self.effect_prob, "rl_share": self.rl_share}
        for name, p in probs.items():
            if not 0 <= p <= 1:
                raise ValueError(f"prior: {name} probability {p!r}; expected a value in [0, 1]")
        unknown = sorted(set(self.effect_prob) - set(SCHEDULE_EFFECTS + SHAPE_EFFECTS + RL_EFFECTS))
        if unknown:
            raise ValueError(f"prior: unknown effect(s) {unknown}; expected some of {EFFECTS}")
        if set(self.noise_prob) != set(NOISES) or not np.isclose(sum(self.noise_prob.values()), 1):
            raise ValueError(f"prior: noise_prob={self.noise_prob}; expected {NOISES} summing to 1")


@dataclass(frozen=True)
class Curve:
    """One drawn learning curve and what made it."""

    steps: np.ndarray  # increasing cumulative work
    loss: np.ndarray  # > 0
    family: str  # base family (FAMILIES)
    effects: tuple[str, ...]  # schedule, shape and RL effects, then the noise kind
    rl: bool  # RL-like (1 - normalised smoothed return)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _base_shape(family: str, rng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray]:
    """Fraction of the way from ``top`` to the floor still to go, as a function of the
    normalised effective work ``u`` in [0, 1] (1 at u = 0, decreasing)."""
    span = _log_uniform(rng, 10.0, 3000.0)  # x = 1 + span * u: how many "first steps" long
    if family == "pow3":
        a = rng.uniform(0.1, 1.5)
        return lambda u: (1 + span * u) ** -a
    if family == "ilog2":
        return lambda u: np.log(2.0) / np.log(2 + span * u)
    if family == "janoschek":
        k, d = _log_uniform(rng, 1e-3, 0.5), rng.uniform(0.3, 1.5)
        return lambda u: np.exp(-k * (span * u) ** d)
    if family == "weibull":
        s, d = _log_uniform(rng, 0.02, 2.0), rng.uniform(0.2, 1.0)
        return lambda u: np.exp(-((u / s) ** d))
    if family == "mmf":
        k, d = _log_uniform(rng, 1e-3, 1.0), rng.uniform(0.3, 2.0)
        return lambda u: 1.0 / (1.0 + (k * span * u) ** d)
    if family == "exp3":
        k = _log_uniform(rng, 0.5, 30.0)
        return lambda u: np.exp(-k * u)
    if family == "optimus":
        a = _log_uniform(rng, 1e-3, 1.0)
        return lambda u: 1.0 / (1.0 + a * span * u)
    if family == "mixture":
        parts = rng.choice(FAMILIES[:-1], size=int(rng.integers(2, 4)), replace=False)
        weights = rng.dirichlet(np.ones(len(parts)))
        shapes = [_base_shape(str(f), rng) for f in parts]
        return lambda u: sum(wt * f(u) for wt, f in zip(weights, shapes))
    raise ValueError(f"prior: unknown family {family!r}; expected one of {FAMILIES}")


def _learning_rate(u: np.ndarray, effects: list[str], rng: np.random.Generator) -> np.ndarray:
    """Relative learning rate (peak 1) along normalised work ``u`` for the schedule effects."""
    lr = np.ones_like(u)
    if "warmup" in effects:
        lr = lr * np.minimum(1.0, u / rng.uniform(0.02, 0.2))
    if "step_decay" in effects:
        for m in np.sort(rng.uniform(0.3, 0.9, size=int(rng.integers(1, 3)))):
            lr = np.where(u >= m, lr * 0.1, lr)
    if "cosine" in effects:
        lr = lr * 0.5 * (1 + np.cos(np.pi * u))
    return lr


def _shape_effects(
    u: np.ndarray, t: np.ndarray, effects: list[str], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Effective work ``t`` after stalls, and an additive log-loss term."""
    extra = np.zeros_like(u)
    if "flat_start" in effects:  # no progress at all for the first part (RL exploration)
        t = np.maximum(t - t[np.searchsorted(u, rng.uniform(0.1, 0.5))], 0.0)
    if "plateau" in effects:  # stuck for a while, then a breakthrough drop
        a = rng.uniform(0.1, 0.6)
        b = min(a + rng.uniform(0.1, 0.4), 0.95)
        ta, tb = np.interp([a, b], u, t)
        t = np.where(u < a, t, np.where(u < b, ta, ta + (t - tb)))
        extra -= rng.uniform(0.1, 1.0) / (1 + np.exp(-(u - b) / rng.uniform(0.003, 0.03)))
    if "jumps" in effects:  # the agent "gets it": sudden drops
        for c in rng.uniform(0.1, 0.9, size=int(rng.integers(1, 4))):
            extra -= rng.uniform(0.2, 1.5) / (1 + np.exp(-(u - c) / rng.uniform(0.002, 0.03)))
    if "non_monotone" in effects:  # set-backs: forgetting, policy collapse
        for c in rng.uniform(0.2, 0.95, size=int(rng.integers(1, 3))):
            height, width = rng.uniform(0.1, 1.0), rng.uniform(0.01, 0.2)
            if rng.uniform() < 0.5:  # temporary
                extra += height * np.exp(-0.5 * ((u - c) / width) ** 2)
            else:  # lasting
                extra += height / (1 + np.exp(-(u - c) / width))
    if "divergence" in effects:  # the loss climbs away (too large a learning rate)
        d = rng.uniform(0.3, 0.95)
        extra += _log_uniform(rng, 0.5, 10.0) * np.maximum(u - d, 0.0) ** rng.uniform(1.0, 2.0)
    return t, extra


def _noise(
    rng: np.random.Generator, kind: str, log_loss: np.ndarray, u: np.ndarray, rl: bool
) -> np.ndarray:
    """Additive log-loss noise of the given kind."""
    n = len(u)
    scale = _log_uniform(rng, 0.003, 0.3 if rl else 0.1)
    if kind == "gaussian":
        return scale * rng.standard_normal(n)
    if kind == "heteroscedastic":  # noisier early, or noisier where the loss is high
        level = np.exp(log_loss - log_loss.max())
        shape = (1 - u) ** rng.uniform(0.5, 3) if rng.uniform() < 0.5 else level
        return scale * (0.2 + 2 * shape) * rng.standard_normal(n)
    if kind == "heavy_tailed":
        return scale * rng.standard_t(rng.uniform(1.5, 5.0), n).clip(-50, 50)
    raise ValueError(f"prior: unknown noise {kind!r}; expected one of {NOISES}")


def sample_curve(rng: np.random.Generator, config: PriorConfig | None = None) -> Curve:
    """One curve drawn from the prior."""
    cfg = config or PriorConfig()
    n = int(rng.integers(cfg.n_points[0], cfg.n_points[1] + 1))
    w_end = 10.0 ** rng.uniform(*cfg.log10_work)
    if rng.uniform() < 0.8:  # logged every k steps, as most jobs log
        steps = np.arange(1, n + 1) * (w_end / n)
    else:  # logged at geometric intervals
        steps = np.geomspace(w_end / (n * _log_uniform(rng, 1, 100)), w_end, n)
    u = steps / steps[-1]
    rl = rng.uniform() < cfg.rl_share
    family = str(rng.choice(FAMILIES))
    pool = SCHEDULE_EFFECTS + SHAPE_EFFECTS + (RL_EFFECTS if rl else ())
    effects = [e for e in pool if rng.uniform() < cfg.effect_prob.get(e, 0.0)]
    lr = _learning_rate(u, effects, rng)
    du = np.diff(u, prepend=0.0)
    t = np.cumsum(lr * du)  # effective work: progress per unit work follows the rate
    t, extra = _shape_effects(u, t / max(t[-1], 1e-12), effects, rng)
    shape = _base_shape(family, rng)(np.clip(t, 0.0, 1.0))
    if rl:  # loss = 1 - return, from near 1 down towards a floor in (0, 1)
        top, floor = rng.uniform(0.85, 1.0), rng.uniform(0.0, 0.8)
    else:
        top = _log_uniform(rng, *cfg.top)
        floor = top * _log_uniform(rng, *cfg.floor_fraction)
    noise_floor = 1.0 - lr if {"step_decay", "cosine", "warmup"} & set(effects) else 0.0
    log_loss = np.log(floor + (top - floor) * shape)
    log_loss = log_loss - rng.uniform(0.0, 0.3) * noise_floor * (top > floor) + extra
    kind = str(rng.choice(NOISES, p=[cfg.noise_prob[k] for k in NOISES]))
    log_loss = log_loss + _noise(rng, kind, log_loss, u, rl)
    loss = np.exp(np.clip(log_loss, np.log(LOSS_FLOOR), np.log(1e4)))
    if rl:  # returns are smoothed and bounded, as the collectors report them
        width = int(rng.integers(1, 10))
        loss = np.convolve(
            np.pad(loss, (width - 1, 0), mode="edge"), np.ones(width) / width, "valid"
        )
        loss = np.clip(loss, LOSS_FLOOR, 1.0)
    return Curve(steps, loss, family, (*effects, kind), rl)


def sample_curves(n: int, seed: int = 0, config: PriorConfig | None = None) -> list[Curve]:
    """``n`` curves from the prior (the same seed gives the same curves)."""
    if n < 0:
        raise ValueError(f"prior: n={n}; expected a number of curves >= 0")
    rng = np.random.default_rng(seed)
    return [sample_curve(rng, config) for _ in range(n)]


def prior_traces(n: int, seed: int = 0, config: PriorConfig | None = None) -> TraceSet:
    """``n`` prior curves as a trace set (family ``prior``, split ``train``)."""
    curves = sample_curves(n, seed, config)
    if not curves:
        raise ValueError("prior: n=0; expected at least one curve for a trace set")
    frame = pd.DataFrame(
        {
            "trace_id": np.repeat([f"prior-{i}" for i in range(n)], [len(c.steps) for c in curves]),
            "family": "prior",
            "source": np.repeat(
                [f"prior/{c.family}/{i}" for i, c in enumerate(curves)],
                [len(c.steps) for c in curves],
            ),
            "step": np.concatenate([c.steps for c in curves]),
            "loss": np.concatenate([c.loss for c in curves]),
            "split": "train",
        }
    )
    return TraceSet.from_frame(validate_traces(frame, origin="the synthetic prior"))
