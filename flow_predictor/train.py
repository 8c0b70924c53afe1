"""Training of the flow predictor: prefixes of train-split traces -> future trajectories.

Every trace contributes ``prefixes_per_trace`` random prefixes (current work at a
uniformly drawn logged point between ``min_fraction`` and ``max_fraction`` of the trace).
A share ``sim_like`` of them is re-sampled the way the simulator reports losses: a few
(3–30) reports at evenly spaced work with the loss of the last logged point, so the
model sees both dense logged curves and the sparse reports of a scheduled task.
Validation (model selection) scores the flow on the ``val`` split each epoch; the best
epoch is written to ``out`` and every epoch to ``out`` with suffix ``.last.pt`` (with the
optimiser state, for ``--resume``).  TensorBoard scalars go to ``<out dir>/tb``.

Two stages, each optional: with ``prior_curves > 0`` the model is first *pretrained* for
``prior_epochs`` on curves drawn from the synthetic prior (:mod:`flow_predictor.prior`;
best epoch by validation to ``out`` with suffix ``.prior.pt``), then *fine-tuned* for
``epochs`` on the library's train split, starting from the pretrained weights
(``epochs=0``: the prior-only model).  The normalisation is fitted on the data of every
stage that runs.  ``exclude_families`` leaves families out of training and validation
(the leave-one-family-out evaluation, :mod:`flow_predictor.lofo`).

Training runs on ``device`` (default: cuda when available).  The random draws are made
on the CPU and moved there (one seed, the same draws on every device), validation scores
a CPU copy of the network, and checkpoints hold CPU tensors.
"""

from __future__ import annotations

import copy
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
from mara_env.traces import TraceError, TraceSet, load_traces


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
    synthetic: int = 0  # curves of the synthetic prior mixed into the library's train split
    prior_curves: int = 0  # pretrain on this many prior curves first (0: no pretraining)
    prior_epochs: int = 10  # pretraining epochs (with prior_curves > 0)
    prior_prefixes: int = 40  # prefixes per prior curve
    prior_lr: float | None = None  # pretraining peak learning rate (None: lr)
    exclude_families: tuple[str, ...] = ()  # left out of train and val splits
    seed: int = 0
    max_minutes: float | None = None  # stop (and keep the checkpoints) after this long
    device: str | None = None  # torch device to train on (None: cuda when available, else cpu)

    def __post_init__(self) -> None:
        counts = {
            "epochs": self.epochs,
            "synthetic": self.synthetic,
            "prior_curves": self.prior_curves,
        }
        positive = {
            "batch_size": self.batch_size,
            "prefixes_per_trace": self.prefixes_per_trace,
            "prior_epochs": self.prior_epochs,
            "prior_prefixes": self.prior_prefixes,
            "hidden": self.hidden,
            "depth": self.depth,
            "val_samples": self.val_samples,
        }
        for key, value in {**counts, **positive}.items():
            low = 1 if key in positive else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"train: {key}={value!r}; expected an integer >= {low}")
        if self.epochs == 0 and self.prior_curves == 0:
            raise ValueError("train: epochs=0 and prior_curves=0; expected something to train on")
        for key, value in {"lr": self.lr, "prior_lr": self.prior_lr or 1.0}.items():
            if not value > 0:
                raise ValueError(f"train: {key}={value!r}; expected a learning rate > 0")
        if not 0 <= self.sim_like <= 1:
            raise ValueError(f"train: sim_like={self.sim_like!r}; expected a share in [0, 1]")
        if not 0 < self.min_fraction <= self.max_fraction < 1:
            raise ValueError(
                f"train: min_fraction={self.min_fraction!r}, max_fraction="
                f"{self.max_fraction!r}; expected 0 < min_fraction <= max_fraction < 1"
            )
        object.__setattr__(self, "exclude_families", tuple(self.exclude_families))
        try:
            resolve_device(self.device)
        except ValueError as exc:
            raise ValueError(f"train: device={self.device!r}; {exc}") from None


def resolve_device(name: str | None) -> torch.device:
    """The torch device ``name`` names (None: cuda when available, else cpu); ValueError
    "expected ..." naming the devices this machine can train on when it names none."""
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = torch.backends.mps.is_available()
    if name is None:
        return torch.device("cuda" if cuda else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):  # not a device string torch knows
        device = None
    if device is not None and (
        (device.type == "cpu" and device.index in (None, 0))
        or (device.type == "cuda" and (device.index or 0) < cuda)
        or (device.type == "mps" and mps and device.index in (None, 0))
    ):
        return device
    usable = ["cpu"]
    if cuda:
        usable += ["cuda", "cuda:0" if cuda == 1 else f"cuda:0 ... cuda:{cuda - 1}"]
    if mps:
        usable.append("mps")
    here = "" if cuda else " (this machine has no CUDA device)"
    choices = ", ".join(usable[:-1]) + " or " + usable[-1] if len(usable) > 1 else usable[0]
    raise ValueError(f"expected {choices}{here}")


@dataclass(frozen=True)
class Dataset:
    """Training examples: condition, target trajectory and its validity mask."""

    cond: np.ndarray
    target: np.ndarray
    mask: np.ndarray


# How the shipped checkpoint (flow_predictor/checkpoints/flow_v3.pt) was trained; chosen on
# the val split (docs/predictor.md).  `mara reproduce --full` retrains with it.
SHIPPED_RECIPE = TrainConfig(
    hidden=128,
    depth=3,
    epochs=40,
    lr=5e-4,
    synthetic=1500,  # prior curves rehearsed while fine-tuning on the library
    prior_curves=3000,
    prior_epochs=10,
    prior_lr=2e-3,
)


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


def build_dataset(
    traces: TraceSet, cfg: TrainConfig, rng: np.random.Generator, per_trace: int | None = None
) -> Dataset:
    """Random prefixes (``per_trace``, default ``cfg.prefixes_per_trace``) of every trace
    with their future targets."""
    works, losses, targets, masks = [], [], [], []
    for i in range(len(traces)):
        steps, loss = traces.trace(i)
        n_pts = len(steps)
        lo = max(MIN_REPORTS, int(math.ceil(cfg.min_fraction * n_pts)))
        hi = max(lo, int(cfg.max_fraction * n_pts))
        for n in rng.integers(lo, hi + 1, size=per_trace or cfg.prefixes_per_trace):
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
    """Flow metrics on the validation instances (averaged over targets), scored on the CPU
    (the numpy sampler): a network on another device is copied there."""
    on_cpu = all(p.device.type == "cpu" for p in net.parameters())
    cpu_net = net if on_cpu else copy.deepcopy(net).cpu()
    rows = score(FlowPredictor(cpu_net, norm, n_samples=n_samples), inst)
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


def concat(parts: list[Dataset]) -> Dataset:
    """One dataset holding every example of ``parts``."""
    names = [f.name for f in dataclasses.fields(Dataset)]
    return Dataset(*(np.concatenate([getattr(d, name) for d in parts]) for name in names))


def load_split(cfg: TrainConfig, split: str) -> TraceSet:
    """A split of the configured library without ``cfg.exclude_families``."""
    traces = load_traces(cfg.traces, split=split)
    if not cfg.exclude_families:
        return traces
    have = sorted(set(traces.families))
    unknown = [f for f in cfg.exclude_families if f not in have]
    if unknown:
        raise TraceError(
            f"exclude_families: unknown family {unknown}; the {split} split has {have}"
        )
    keep = [f for f in have if f not in cfg.exclude_families]
    if not keep:
        raise TraceError(f"exclude_families={list(cfg.exclude_families)} leaves no {split} traces")
    return load_traces(cfg.traces, split=split, families=keep)


@dataclass
class _Run:
    """What every epoch of a training run shares."""

    cfg: TrainConfig
    norm: Normalisation
    val_inst: Any
    writer: Any
    progress: bool
    wall: float
    started: float
    device: torch.device

    def elapsed(self) -> float:
        return self.wall + time.time() - self.started

    def out_of_time(self) -> bool:
        return self.cfg.max_minutes is not None and self.elapsed() > 60 * self.cfg.max_minutes


def _stage(
    run: _Run,
    stage: str,
    net: VelocityNet,
    data: Dataset,
    epochs: int,
    lr: float,
    best_path: Path,
    state: dict[str, Any],
) -> dict[str, Any]:
    """Train ``net`` for ``epochs`` (from ``state['epoch']`` if resuming this stage); the best
    epoch by validation MAE goes to ``best_path``, every epoch to the ``.last.pt`` file."""
    cfg, norm = run.cfg, run.norm
    last = Path(cfg.out).with_suffix(".last.pt")
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    if state.get("optimizer"):
        opt.load_state_dict(state["optimizer"])
    cond = torch.as_tensor((data.cond - norm.cond_mean) / norm.cond_std, device=run.device)
    target = torch.as_tensor((data.target - norm.target_mean) / norm.target_std, device=run.device)
    mask = torch.as_tensor(data.mask, device=run.device)
    n = len(cond)
    steps_per_epoch = max(1, n // cfg.batch_size)
    total_steps = steps_per_epoch * epochs
    gen = torch.Generator().manual_seed(cfg.seed)  # on the CPU: the same draws on any device
    best = state.get("best", {"mae_log_ratio": float("inf")})
    tag = "" if stage == "library" else f"{stage}_"
    offset = 0 if stage == "library" else 1_000_000  # distinct draws per stage
    for epoch in range(state.get("epoch", 0), epochs):
        gen.manual_seed(cfg.seed * 1000 + epoch + offset)  # resumable: the epoch sets its draws
        perm = torch.randperm(n, generator=gen).to(run.device)
        bar = tqdm(
            range(steps_per_epoch),
            desc=f"{stage} epoch {epoch + 1}/{epochs}",
            disable=not run.progress,
        )
        running = 0.0
        for k in bar:
            step = epoch * steps_per_epoch + k
            for g in opt.param_groups:
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            idx = perm[k * cfg.batch_size : (k + 1) * cfg.batch_size]
            loss = cfm_loss(net, target[idx], cond[idx], mask[idx], generator=gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
            if k % 50 == 49:
                bar.set_postfix(loss=f"{running / (k + 1):.4f}")
        metrics = validate(net, norm, run.val_inst, cfg.val_samples)
        run.writer.add_scalar(f"{tag}train/cfm_loss", running / steps_per_epoch, epoch + 1)
        for key, v in metrics.items():
            run.writer.add_scalar(f"{tag}val/{key}", v, epoch + 1)
        run.writer.flush()
        info = {
            "stage": stage,
            "epoch": epoch + 1,
            "config": dataclasses.asdict(cfg),
            "val": metrics,
            "wall_s": run.elapsed(),
            "device": str(run.device),
        }
        if metrics["mae_log_ratio"] < best["mae_log_ratio"]:
            best = {**metrics, "epoch": epoch + 1}
            save_checkpoint(best_path, net, norm, {**info, "best": best})
        save_checkpoint(last, net, norm, {**info, "best": best, "optimizer": opt.state_dict()})
        if run.progress:
            tqdm.write(
                f"{stage} epoch {epoch + 1}: cfm {running / steps_per_epoch:.4f}  val {metrics}"
            )
        if run.out_of_time():
            break
    return best


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) and return the best validation metrics; writes checkpoints."""
    from torch.utils.tensorboard import SummaryWriter

    from flow_predictor.prior import prior_traces

    torch.set_num_threads(1)
    out = Path(cfg.out)
    last = out.with_suffix(".last.pt")
    prior_out = out.with_suffix(".prior.pt")
    state: dict[str, Any] = {}
    if resume:
        blob = read_checkpoint(last)
        state = blob["train"]
        config = {**state["config"], "epochs": cfg.epochs, "max_minutes": cfg.max_minutes}
        config["device"] = cfg.device  # this machine's, not the one the run started on
        cfg = TrainConfig(**config)
    val_inst = make_instances(load_split(cfg, cfg.val_split))
    parts: dict[str, Dataset] = {}
    if cfg.prior_curves:
        prior = prior_traces(cfg.prior_curves, seed=cfg.seed)
        rng = np.random.default_rng([cfg.seed, 1])
        parts["prior"] = build_dataset(prior, cfg, rng, per_trace=cfg.prior_prefixes)
    if cfg.epochs:
        rng = np.random.default_rng(cfg.seed)
        parts["library"] = build_dataset(load_split(cfg, cfg.split), cfg, rng)
        if cfg.synthetic:
            mixed = build_dataset(prior_traces(cfg.synthetic, seed=cfg.seed + 1), cfg, rng)
            parts["library"] = concat([parts["library"], mixed])
    norm = fit_normalisation(concat(list(parts.values())))
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    fc = FlowConfig(COND_DIM, TARGET_DIM, cfg.hidden, cfg.depth, cfg.cond_hidden)
    net = (build_net(blob, last) if resume else VelocityNet(fc)).to(device)  # CPU init
    writer = SummaryWriter(str(out.parent / "tb"))
    writer.add_text("device", str(device))
    wall = state.get("wall_s", 0.0)
    run = _Run(cfg, norm, val_inst, writer, progress, wall, time.time(), device)
    result: dict[str, Any] = {}
    if cfg.prior_curves and state.get("stage", "prior") == "prior":
        lr = cfg.prior_lr or cfg.lr
        best = _stage(run, "prior", net, parts["prior"], cfg.prior_epochs, lr, prior_out, state)
        result = {"prior_best": best}
        blob = read_checkpoint(prior_out)
        net = build_net(blob, prior_out).to(device)  # fine-tune from the best pretrained epoch
        state = {}
        if not cfg.epochs or run.out_of_time():  # the pretrained model is the result
            save_checkpoint(out, net, norm, blob["train"])
    if cfg.epochs and not run.out_of_time():
        _stage(run, "library", net, parts["library"], cfg.epochs, cfg.lr, out, state)
    writer.close()
    blob = read_checkpoint(out)
    spread, coverage = calibrate_spread(FlowPredictor(build_net(blob, out), norm), val_inst)
    save_checkpoint(out, build_net(blob, out), norm, blob["train"], spread=spread)
    best = blob["train"]["best"]
    return {**result, **best, "spread": spread, "coverage80_calibrated": coverage}
