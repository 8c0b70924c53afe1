"""Vision traces: small CNNs and pixel MLPs on sklearn digits and procedurally drawn images."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from mara_traces.common import OPTIMIZERS, SCHEDULES, log_uniform, mlp, train_supervised

SIZE = 16  # side of the drawn images (digits stay 8x8)
# Sampling weight of each image generator; a split's generators sum to its share
# (train 0.70, val 0.15, test 0.15 under mara_traces.splits.SPLIT_RULES).
DATASET_WEIGHTS = {"digits": 0.35, "shapes": 0.35, "lines": 0.15, "textures": 0.15}
LR_RANGE = {
    "sgd": (3e-3, 0.3),
    "momentum": (3e-4, 0.05),
    "adam": (1e-4, 1e-2),
    "rmsprop": (1e-4, 5e-3),
}


def _grid(n: int, rng: np.random.Generator, lo: float, hi: float):
    """Pixel coordinates relative to one random centre per image, shape (n, SIZE, SIZE)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    cy, cx = (rng.uniform(lo, hi, (2, n, 1, 1))).astype(np.float32)
    return yy - cy, xx - cx


def draw_shapes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Circle / square / triangle / cross, filled or outlined, random place and size."""
    y = rng.integers(0, 4, n)
    dy, dx = _grid(n, rng, 5.0, 11.0)
    r = rng.uniform(2.5, 5.0, (n, 1, 1)).astype(np.float32)

    def mask(r):
        return np.select(
            [y[:, None, None] == k for k in range(4)],
            [
                np.hypot(dx, dy) <= r,
                np.maximum(abs(dx), abs(dy)) <= r,
                (abs(dx) <= (dy + r) / 2) & (abs(dy) <= r),
                ((abs(dx) <= 1) & (abs(dy) <= r)) | ((abs(dy) <= 1) & (abs(dx) <= r)),
            ],
        )

    outline = rng.random((n, 1, 1)) < 0.5
    img = mask(r) & ~(outline & mask(r - 1.3) & (y[:, None, None] != 3))
    return img.astype(np.float32), y


def draw_lines(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One line segment; the class is its orientation (0, 45, 90, 135 degrees, jittered)."""
    y = rng.integers(0, 4, n)
    theta = np.deg2rad(45.0 * y + rng.uniform(-12, 12, n))[:, None, None]
    dy, dx = _grid(n, rng, 4.0, 12.0)
    length = rng.uniform(4.0, 8.0, (n, 1, 1))
    along = dx * np.cos(theta) + dy * np.sin(theta)
    across = -dx * np.sin(theta) + dy * np.cos(theta)
    return ((abs(across) < 0.8) & (abs(along) < length)).astype(np.float32), y


def draw_textures(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stripes at 0/60/120 degrees, a checkerboard, or blotchy noise; random scale and phase."""
    y = rng.integers(0, 5, n)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    freq = rng.uniform(0.5, 1.3, (n, 1, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 1, 1))
    theta = np.deg2rad(60.0 * np.minimum(y, 2))[:, None, None]
    stripes = np.sin(freq * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)
    checker = np.sin(freq * xx + phase) * np.sin(freq * yy + phase)
    coarse = rng.standard_normal((n, SIZE // 4, SIZE // 4))
    blotches = np.kron(coarse, np.ones((4, 4)))
    k = y[:, None, None]
    img = np.where(k < 3, stripes, np.where(k == 3, checker, blotches))
    return (img > 0).astype(np.float32), y


def load_images(name: str, n: int, noise: float, dseed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 1, H, W) with pixel noise, labels) of one generator."""
    rng = np.random.default_rng(dseed)
    if name == "digits":
        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).reshape(-1, 8, 8)
    else:
        x, y = {"shapes": draw_shapes, "lines": draw_lines, "textures": draw_textures}[name](n, rng)
    x = x + noise * rng.standard_normal(x.shape)
    return x[:, None].astype(np.float32), y


class ConvNet(nn.Module):
    """``depth`` 3x3 conv blocks (channels doubling, 2x2 pooling), then a linear head."""

    def __init__(self, side: int, channels: int, depth: int, n_out: int):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 1
        for i in range(depth):
            c_out = channels * 2**i
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]
            if side > 4:
                layers.append(nn.MaxPool2d(2))
                side //= 2
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in * side * side, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def sample_config(rng: np.random.Generator, budget: float = 1.0) -> dict:
    """One run's image generator, model and hyper-parameters (``budget`` scales the points)."""
    names = list(DATASET_WEIGHTS)
    weights = np.array(list(DATASET_WEIGHTS.values()))
    name = str(rng.choice(names, p=weights / weights.sum()))
    opt = str(rng.choice(OPTIMIZERS))
    cfg: dict = {
        "dataset": name,
        "noise": round(rng.uniform(0.05, 0.8), 2),
        "dseed": int(rng.integers(100)),
    }
    if name != "digits":
        cfg["n"] = int(rng.choice([500, 1000, 2000]))
    cfg |= {
        "model": (
            f"cnn-{int(rng.choice([4, 8, 12]))}x{int(rng.integers(1, 4))}"
            if rng.random() < 0.65
            else f"mlp-{int(rng.choice([32, 64, 128]))}x{int(rng.integers(1, 3))}"
        ),
        "opt": opt,
        "lr": log_uniform(rng, *LR_RANGE[opt]),
        "sched": str(rng.choice(SCHEDULES, p=[0.6, 0.2, 0.2])),
        "bs": int(rng.choice([16, 32, 64, 128])),
        "points": max(12, int(rng.integers(120, 201) * budget)),
        "every": int(rng.integers(2, 5)),
        "seed": int(rng.integers(10_000)),
    }
    return cfg


def run(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Train the configured model; (optimiser step, mean training loss) per logged point."""
    torch.manual_seed(cfg["seed"])
    x, y = load_images(cfg["dataset"], cfg.get("n", 0), cfg["noise"], cfg["dseed"])
    kind, size = cfg["model"].split("-")
    width, depth = (int(v) for v in size.split("x"))
    n_out = int(y.max()) + 1
    side = x.shape[-1]
    if kind == "cnn":
        model: nn.Module = ConvNet(side, width, depth, n_out)
    else:
        model = nn.Sequential(nn.Flatten(), mlp(side * side, width, depth, n_out))
    return train_supervised(
        model,
        torch.as_tensor(x),
        torch.as_tensor(y, dtype=torch.long),
        nn.CrossEntropyLoss(),
        cfg["opt"],
        cfg["lr"],
        cfg["sched"],
        cfg["bs"],
        cfg["points"],
        cfg["every"],
        cfg["seed"],
    )
