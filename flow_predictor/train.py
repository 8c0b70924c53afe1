"""Training of the flow predictor: prefixes of train-split traces -> future trajectories.

Every trace contributes ``prefixes_per_trace`` random prefixes (current work at a
uniformly drawn logged point between ``min_fraction`` and ``max_fraction`` of the trace).
A share ``sim_like`` of them is re-sampled the way the simulator reports losses: a few
(3–30) reports at evenly spaced work with the loss of the last logged point, so the
model sees both dense logged curves and the sparse reports of a scheduled task.
Validation (model selection) scores the flow on the ``val`` split each epoch; the best
epoch is written to ``out`` and every epoch to ``out`` with suffix ``.last.pt`` (with the
optimiser state, for ``--resume``).  TensorBoard scalars go to ``<out dir>/tb``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from flow_predictor.checkpoint import build_net, read_checkpoint, save_checkpoint
from flow_predictor.evaluate import make_instances, score
from flow_predictor.features import (
    COND_DIM,
    TARGET_DIM,
    encode_target,
    future_targets,
    prefix_features,
    reports_at,
)
from flow_predictor.flow import FlowPredictor, Normalisation
from flow_predictor.model import FlowConfig, VelocityNet, cfm_loss
from flow_predictor.remaining import LOSS_FLOOR, MIN_REPORTS
from mara_env.traces import TraceSet, load_traces


@dataclass(frozen=True)
class TrainConfig:
    """Every hyper-parameter of a training run, with its default."""

    traces: str | None = None  # trace library (None: the shipped one)
    split: str = "train"
    val_split: str = "val"
    out: str = "runs/predictor/flow.pt"  # never inside the package (read-only once installed)
    epochs: int = 30
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    prefixes_per_trace: int = 200
    min_fraction: float = 0.05
    max_fraction: float = 0.8
    sim_like: float = 0.2
    hidden: int = 256
    depth: int = 3
    cond_hidden: int = 128
    val_samples: int = 32
    synthetic: int = 0  # extra synthetic sudden-drop curves added to the training traces
    seed: int = 0
    max_minutes: float | None = None  # stop (and keep the checkpoints) after this long


@dataclass(frozen=True)
class Dataset:
    """Training examples: condition, target trajectory and its validity mask."""

    cond: np.ndarray
    target: np.ndarray
    mask: np.ndarray


def sample_prefix(
    steps: np.ndarray, loss: np.ndarray, n: int, sim_like: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` logged points, or simulator-like sparse reports up to ``steps[n-1]``."""
    if not sim_like:
        return steps[:n], loss[:n]
    m = int(rng.integers(MIN_REPORTS, 31))
    start = rng.uniform(0.0, 1.0) * steps[n - 1] / m
    works = np.linspace(start, steps[n - 1], m + 1)[1:] if start > 0 else None
    if works is None:
        works = steps[n - 1] * np.arange(1, m + 1) / m
    return works, reports_at(steps, loss, works)


def synthetic_traces(n: int, rng: np.random.Generator) -> TraceSet:
    """``n`` parametric curves that plateau, then drop sharply (sigmoid in log-work), then floor.

    They teach the shape that slow power laws lack: a sudden learning phase (RL agents
    that "get it", step learning-rate schedules).
    """
    import pandas as pd

    from mara_env.traces import validate_traces

    frames = []
    for i in range(n):
        m = int(rng.integers(100, 200))
        w = np.arange(1, m + 1) * float(np.exp(rng.uniform(0, 6)))
        top, floor = rng.uniform(0.3, 1.0), np.exp(rng.uniform(np.log(0.01), np.log(0.5)))
        floor = min(floor, 0.8 * top)
        mid = np.quantile(np.log(w), rng.uniform(0.05, 0.9))
        sharp = np.exp(rng.uniform(np.log(1.0), np.log(20.0)))
        drift = rng.uniform(0.0, 0.3)
        log_l = np.log(floor) + (np.log(top) - np.log(floor)) / (
            1 + np.exp(sharp * (np.log(w) - mid))
        )
        log_l = log_l - drift * (np.log(w) - np.log(w[0])) / np.log(w[-1] / w[0])
        noise = rng.uniform(0.005, 0.1) * rng.standard_normal(m)
        loss = np.exp(log_l + noise)
        frames.append(
            pd.DataFrame(
                {
                    "trace_id": f"synthetic-{i}",
                    "family": "synthetic",
                    "source": f"synthetic-{i}",
                    "step": w,
                    "loss": loss,
                    "split": "train",
                }
            )
        )
    return TraceSet.from_frame(validate_traces(pd.concat(frames, ignore_index=True)))


def build_dataset(traces: TraceSet, cfg: TrainConfig, rng: np.random.Generator) -> Dataset:
    """Random prefixes of every trace with their future targets."""
    works, losses, targets, masks = [], [], [], []
    for i in range(len(traces)):
        steps, loss = traces.trace(i)
        n_pts = len(steps)
        lo = max(MIN_REPORTS, int(math.ceil(cfg.min_fraction * n_pts)))
        hi = max(lo, int(cfg.max_fraction * n_pts))
        for n in rng.integers(lo, hi + 1, size=cfg.prefixes_per_trace):
            w, lo_ = sample_prefix(steps, loss, int(n), rng.uniform() < cfg.sim_like, rng)
            ref = float(np.log(max(lo_.min(), LOSS_FLOOR)))
            z, valid = future_targets(steps, loss, float(w[-1]), ref)
            works.append(w)
            losses.append(lo_)
            targets.append(z)
            masks.append(valid)
    return Dataset(
        cond=prefix_features(works, losses),
        target=encode_target(np.stack(targets)).astype(np.float32),
        mask=np.stack(masks).astype(np.float32),
    )


def fit_normalisation(data: Dataset) -> Normalisation:
    """Per-dimension mean/std of conditions, and of targets over their valid entries."""
    m = data.mask
    cnt = np.maximum(m.sum(0), 1.0)
    tmean = (data.target * m).sum(0) / cnt
    tstd = np.sqrt((((data.target - tmean) ** 2) * m).sum(0) / cnt)
    return Normalisation(
        cond_mean=data.cond.mean(0),
        cond_std=np.maximum(data.cond.std(0), 1e-3),
        target_mean=tmean,
        target_std=np.maximum(tstd, 1e-2),
    )


def validate(net: VelocityNet, norm: Normalisation, inst: Any, n_samples: int) -> dict[str, float]:
    """Flow metrics on the validation instances (averaged over targets)."""
    rows = score(FlowPredictor(net, norm, n_samples=n_samples), inst)
    net.train()
    return {
        "mae_log_ratio": float(rows["abs_log_ratio"].mean()),
        "crps": float(rows["crps"].mean()),
        "coverage80": float(rows["covered"].mean()),
    }


SPREADS = tuple(np.round(np.arange(0.8, 3.01, 0.1), 2))


def calibrate_spread(predictor: FlowPredictor, inst: Any) -> tuple[float, float]:
    """(spread, coverage): the spread whose 10–90 % intervals cover closest to 80 % on ``inst``."""
    fit = predictor.fit(inst.works, inst.losses)
    best = (1.0, -1.0)
    for spread in SPREADS:
        q = dataclasses.replace(fit, spread=float(spread)).remaining(inst.target, inst.prefix)
        lo, hi = q.quantiles([0.1, 0.9]).T
        cov = float(np.mean((lo <= inst.true_remaining) & (inst.true_remaining <= hi)))
        if abs(cov - 0.8) < abs(best[1] - 0.8):
            best = (float(spread), cov)
    return best


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) and return the best validation metrics; writes checkpoints."""
    from torch.utils.tensorboard import SummaryWriter

    torch.set_num_threads(1)
    out = Path(cfg.out)
    last = out.with_suffix(".last.pt")
    state: dict[str, Any] = {}
    if resume:
        blob = read_checkpoint(last)
        state = blob["train"]
        cfg = TrainConfig(
            **{**state["config"], "epochs": cfg.epochs, "max_minutes": cfg.max_minutes}
        )
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    train_set = load_traces(cfg.traces, split=cfg.split)
    val_inst = make_instances(load_traces(cfg.traces, split=cfg.val_split))
    data = build_dataset(train_set, cfg, rng)
    if cfg.synthetic:
        extra = build_dataset(synthetic_traces(cfg.synthetic, rng), cfg, rng)
        data = Dataset(
            *(
                np.concatenate([a, b])
                for a, b in zip(
                    (data.cond, data.target, data.mask), (extra.cond, extra.target, extra.mask)
                )
            )
        )
    norm = fit_normalisation(data)
    fc = FlowConfig(COND_DIM, TARGET_DIM, cfg.hidden, cfg.depth, cfg.cond_hidden)
    net = build_net(blob, last) if resume else VelocityNet(fc)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if resume:
        opt.load_state_dict(state["optimizer"])
    cond = torch.as_tensor((data.cond - norm.cond_mean) / norm.cond_std)
    target = torch.as_tensor((data.target - norm.target_mean) / norm.target_std)
    mask = torch.as_tensor(data.mask)
    n = len(cond)
    steps_per_epoch = max(1, n // cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    gen = torch.Generator().manual_seed(cfg.seed)
    writer = SummaryWriter(str(out.parent / "tb"))
    start_epoch = state.get("epoch", 0)
    best = state.get("best", {"mae_log_ratio": float("inf")})
    wall = state.get("wall_s", 0.0)
    t0 = time.time()
    for epoch in range(start_epoch, cfg.epochs):
        gen.manual_seed(cfg.seed * 1000 + epoch)  # resumable: the epoch alone sets its draws
        perm = torch.randperm(n, generator=gen)
        bar = tqdm(
            range(steps_per_epoch), desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress
        )
        running = 0.0
        for k in bar:
            step = epoch * steps_per_epoch + k
            for g in opt.param_groups:
                g["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            idx = perm[k * cfg.batch_size : (k + 1) * cfg.batch_size]
            loss = cfm_loss(net, target[idx], cond[idx], mask[idx], generator=gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
            if k % 50 == 49:
                bar.set_postfix(loss=f"{running / (k + 1):.4f}")
        metrics = validate(net, norm, val_inst, cfg.val_samples)
        elapsed = wall + time.time() - t0
        writer.add_scalar("train/cfm_loss", running / steps_per_epoch, epoch + 1)
        for key, v in metrics.items():
            writer.add_scalar(f"val/{key}", v, epoch + 1)
        writer.flush()
        info = {
            "epoch": epoch + 1,
            "config": dataclasses.asdict(cfg),
            "val": metrics,
            "wall_s": elapsed,
        }
        if metrics["mae_log_ratio"] < best["mae_log_ratio"]:
            best = {**metrics, "epoch": epoch + 1}
            save_checkpoint(out, net, norm, {**info, "best": best})
        save_checkpoint(last, net, norm, {**info, "best": best, "optimizer": opt.state_dict()})
        if progress:
            tqdm.write(f"epoch {epoch + 1}: cfm {running / steps_per_epoch:.4f}  val {metrics}")
        if cfg.max_minutes is not None and elapsed > 60 * cfg.max_minutes:
            break
    writer.close()
    blob = read_checkpoint(out)
    spread, coverage = calibrate_spread(FlowPredictor(build_net(blob, out), norm), val_inst)
    save_checkpoint(out, build_net(blob, out), norm, blob["train"], spread=spread)
    return {**best, "spread": spread, "coverage80_calibrated": coverage}
