"""Vision traces: small CNNs and pixel MLPs on sklearn digits and procedurally drawn images."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from mara_traces.common import (
    OPTIMIZERS,
    OPTIMIZERS_V2,
    SCHEDULES,
    SCHEDULES_V2,
    log_uniform,
    mlp,
    train_supervised,
    weighted_choice,
)

SIZE = 16  # side of the drawn images (digits stay 8x8)
# Sampling weight of each image generator; a split's generators sum to its share
# (train 0.70, val 0.15, test 0.15 under mara_traces.splits.SPLIT_RULES).
DATASET_WEIGHTS = {"digits": 0.35, "shapes": 0.35, "lines": 0.15, "textures": 0.15}
# Stream "v2": schedules, optimisers, batch sizes and augmentation as real jobs use them, on
# the v1 generators (all train in v2) and two new generators held out for val and test.
V2_DATASET_WEIGHTS = {"digits": 0.1, "shapes": 0.1, "lines": 0.05, "textures": 0.05}
V2_DATASET_WEIGHTS |= {"dots": 0.35, "rings": 0.35}  # val, test
STREAMS = {"v1": DATASET_WEIGHTS, "v2": V2_DATASET_WEIGHTS}
AUGMENTATIONS = ("none", "shift", "shift+flip")
MAX_SHIFT = 2  # pixels
LR_RANGE = {
    "sgd": (3e-3, 0.3),
    "momentum": (3e-4, 0.05),
    "adam": (1e-4, 1e-2),
    "rmsprop": (1e-4, 5e-3),
    "adamw": (1e-4, 1e-2),
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


def draw_dots(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One to four small filled disks at random places; the class is their number."""
    y = rng.integers(0, 4, n)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    img = np.zeros((n, SIZE, SIZE), bool)
    for k in range(4):
        cy, cx = rng.uniform(2.0, SIZE - 2.0, (2, n, 1, 1))
        r = rng.uniform(1.0, 2.2, (n, 1, 1))
        img |= (np.hypot(yy - cy, xx - cx) <= r) & (k <= y)[:, None, None]
    return img.astype(np.float32), y


def draw_rings(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One to three concentric rings around a random centre; the class is their number."""
    y = rng.integers(0, 3, n)
    dy, dx = _grid(n, rng, 6.0, 10.0)
    dist = np.hypot(dx, dy)
    gap = rng.uniform(1.8, 2.4, (n, 1, 1))
    rings = (y + 1)[:, None, None]
    on = (np.abs(dist / gap - np.round(dist / gap)) < 0.25) & (np.round(dist / gap) >= 1)
    return (on & (np.round(dist / gap) <= rings)).astype(np.float32), y


def augment_batch(kind: str):
    """A batch transform for ``train_supervised``: random shifts (and flips) per batch."""
    if kind == "none":
        return None

    def transform(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        dy, dx = (torch.randint(-MAX_SHIFT, MAX_SHIFT + 1, (2,), generator=gen)).tolist()
        x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
        if "flip" in kind and torch.rand((), generator=gen) < 0.5:
            x = torch.flip(x, dims=(-1,))
        return x

    return transform


def load_images(name: str, n: int, noise: float, dseed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 1, H, W) with pixel noise, labels) of one generator."""
    rng = np.random.default_rng(dseed)
    if name == "digits":
        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).reshape(-1, 8, 8)
    else:
        draw = {
            "shapes": draw_shapes,
            "lines": draw_lines,
            "textures": draw_textures,
            "dots": draw_dots,
            "rings": draw_rings,
        }[name]
        x, y = draw(n, rng)
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


def sample_config(rng: np.random.Generator, budget: float = 1.0, stream: str = "v1") -> dict:
    """One run's image generator, model and hyper-parameters (``budget`` scales the points).

    Stream ``v1`` draws exactly what the first library drew; ``v2`` adds the v2 schedules,
    AdamW, larger batches, augmentation and the held-out v2 generators.
    """
    v2 = stream == "v2"
    name = weighted_choice(rng, STREAMS[stream])
    opt = str(rng.choice(OPTIMIZERS_V2 if v2 else OPTIMIZERS))
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
        "sched": str(rng.choice(SCHEDULES_V2) if v2 else rng.choice(SCHEDULES, p=[0.6, 0.2, 0.2])),
        "bs": int(rng.choice([32, 64, 128, 256] if v2 else [16, 32, 64, 128])),
        "points": max(12, int(rng.integers(120, 201) * budget)),
        "every": int(rng.integers(2, 5)),
        "seed": int(rng.integers(10_000)),
    }
    if v2:
        cfg["aug"] = str(rng.choice(AUGMENTATIONS))
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
        augment_batch(cfg.get("aug", "none")),
    )
