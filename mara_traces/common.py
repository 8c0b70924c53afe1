"""Pieces shared by the collectors: hyper-parameter draws, optimisers, source names, SGD loop."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")
SCHEDULES = ("const", "cosine", "step")
# The v2 streams draw from these; the tuples above stay as they are so v1 draws never change.
OPTIMIZERS_V2 = ("momentum", "adam", "adamw", "sgd")
SCHEDULES_V2 = ("const", "cosine", "step", "warmup_cosine", "invsqrt")
WARMUP = 0.05  # fraction of a run spent warming up (warmup_cosine, invsqrt)


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    """A log-uniform draw from [lo, hi], rounded to two significant digits."""
    return float(f"{np.exp(rng.uniform(np.log(lo), np.log(hi))):.2g}")


def weighted_choice(rng: np.random.Generator, weights: dict[str, float]) -> str:
    """One key of ``weights``, drawn with probability proportional to its weight."""
    w = np.array(list(weights.values()))
    return str(rng.choice(list(weights), p=w / w.sum()))


def source_name(fields: dict[str, object]) -> str:
    """``key=value;key=value`` in the given order; floats in short scientific form."""
    return ";".join(f"{k}={f'{v:.2g}' if isinstance(v, float) else v}" for k, v in fields.items())


def parse_source(source: str) -> dict[str, str]:
    """Inverse of :func:`source_name` (values stay strings)."""
    return dict(part.split("=", 1) for part in source.split(";") if "=" in part)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """One of :data:`OPTIMIZERS` over ``params``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=0.99)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    known = sorted({*OPTIMIZERS, *OPTIMIZERS_V2})
    raise ValueError(f"unknown optimiser {name!r}; expected one of {known}")


def lr_factor(schedule: str, frac: float) -> float:
    """Multiplier of the base learning rate at training progress ``frac`` in [0, 1]."""
    if schedule == "const":
        return 1.0
    if schedule == "cosine":
        return 0.05 + 0.95 * 0.5 * (1.0 + np.cos(np.pi * frac))
    if schedule == "step":  # x0.1 at 1/3 and 2/3 of the run: the drops show in the curve
        return 0.1 ** int(frac * 3)
    if schedule == "warmup_cosine":  # linear warm-up, then cosine down to 5 %
        if frac < WARMUP:
            return (frac + 1e-3) / WARMUP
        rest = (frac - WARMUP) / (1.0 - WARMUP)
        return 0.05 + 0.95 * 0.5 * (1.0 + np.cos(np.pi * rest))
    if schedule == "invsqrt":  # linear warm-up, then 1/sqrt(t) (transformer-style)
        return (frac + 1e-3) / WARMUP if frac < WARMUP else float(np.sqrt(WARMUP / frac))
    known = sorted({*SCHEDULES, *SCHEDULES_V2})
    raise ValueError(f"unknown schedule {schedule!r}; expected one of {known}")


def mlp(
    n_in: int, width: int, depth: int, n_out: int, act: type[nn.Module] = nn.ReLU
) -> nn.Sequential:
    """``depth`` hidden layers of ``width`` units (``depth=0``: a linear model)."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(n_in, width), act()]
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def train_supervised(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    opt: str,
    lr: float,
    schedule: str,
    batch_size: int,
    points: int,
    log_every: int,
    seed: int,
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Minibatch training; logs the mean training loss of each ``log_every`` steps.

    Returns (step, loss) with ``points`` entries; ``step`` counts optimiser steps.
    ``augment`` transforms each input batch (random draws from the given generator).
    """
    gen = torch.Generator().manual_seed(seed)
    optim = make_optimizer(opt, model.parameters(), lr)
    total = points * log_every
    n = len(x)
    order = torch.randperm(n, generator=gen)
    cursor = 0
    steps = np.arange(1, points + 1, dtype=np.float64) * log_every
    losses = np.empty(points)
    acc = 0.0
    for t in range(total):
        if cursor + batch_size > n:
            order, cursor = torch.randperm(n, generator=gen), 0
        idx = order[cursor : cursor + batch_size]
        cursor += batch_size
        for group in optim.param_groups:
            group["lr"] = lr * lr_factor(schedule, t / total)
        xb = x[idx] if augment is None else augment(x[idx], gen)
        loss = loss_fn(model(xb), y[idx])
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 50.0)
        optim.step()
        acc += loss.item()
        if (t + 1) % log_every == 0:
            losses[(t + 1) // log_every - 1] = acc / log_every
            acc = 0.0
    # A diverged run is a real outcome; cap it so the curve stays finite.
    return steps, np.nan_to_num(losses, nan=1e3, posinf=1e3).clip(0.0, 1e3)
