"""Tabular traces: torch MLPs and linear models on sklearn's bundled and generated datasets."""

from __future__ import annotations

import numpy as np
import torch
from sklearn import datasets
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

# Sampling weight of each dataset; the weights of a split's datasets sum to its share
# (train 0.70, val 0.15, test 0.15 under mara_traces.splits.SPLIT_RULES).
DATASET_WEIGHTS = {
    "iris": 0.10,
    "breast_cancer": 0.10,
    "digits": 0.10,
    "linnerud": 0.10,
    "classification": 0.10,
    "regression": 0.10,
    "friedman1": 0.10,
    "diabetes": 0.075,
    "moons": 0.075,
    "wine": 0.075,
    "circles": 0.075,
}
# Stream "v2" (trace library v2): the schedules, optimisers and batch sizes real jobs use, on
# the v1 datasets (all train in v2) and on four new generated datasets held out for val/test.
V2_DATASET_WEIGHTS = {
    **{name: 0.3 / len(DATASET_WEIGHTS) for name in DATASET_WEIGHTS},
    "gaussian_quantiles": 0.175,  # val
    "friedman2": 0.175,  # val
    "hastie": 0.175,  # test
    "friedman3": 0.175,  # test
}
STREAMS = {"v1": DATASET_WEIGHTS, "v2": V2_DATASET_WEIGHTS}
GENERATED = (
    "classification",
    "moons",
    "circles",
    "regression",
    "friedman1",
    "gaussian_quantiles",
    "friedman2",
    "hastie",
    "friedman3",
)
REGRESSION = ("regression", "friedman1", "diabetes", "linnerud", "friedman2", "friedman3")
LR_RANGE = {
    "sgd": (1e-3, 0.5),
    "momentum": (1e-4, 0.1),
    "adam": (1e-4, 3e-2),
    "rmsprop": (1e-4, 1e-2),
    "adamw": (1e-4, 3e-2),
}


def load_dataset(
    name: str, n: int, noise: float, dseed: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(X standardised, y, is_classification); generated sets use ``n``, ``noise``, ``dseed``."""
    if name == "classification":
        x, y = datasets.make_classification(
            n_samples=n,
            n_features=20,
            n_informative=int(4 + 10 * noise),
            n_classes=3,
            flip_y=noise / 2,
            class_sep=1.5 - noise,
            random_state=dseed,
        )
    elif name == "moons":
        x, y = datasets.make_moons(n_samples=n, noise=noise, random_state=dseed)
    elif name == "circles":
        x, y = datasets.make_circles(n_samples=n, noise=noise / 2, factor=0.5, random_state=dseed)
    elif name == "regression":
        x, y = datasets.make_regression(
            n_samples=n, n_features=10, n_informative=5, noise=100 * noise, random_state=dseed
        )
    elif name == "friedman1":
        x, y = datasets.make_friedman1(n_samples=n, noise=5 * noise, random_state=dseed)
    elif name == "gaussian_quantiles":
        x, y = datasets.make_gaussian_quantiles(
            n_samples=n, n_features=int(2 + 10 * noise), n_classes=3, random_state=dseed
        )
    elif name == "friedman2":
        x, y = datasets.make_friedman2(n_samples=n, noise=200 * noise, random_state=dseed)
    elif name == "hastie":
        x, y = datasets.make_hastie_10_2(n_samples=n, random_state=dseed)
        flip = np.random.default_rng(dseed).random(n) < noise / 2
        y = np.where(flip, -y, y)
        y = (y > 0).astype(np.int64)
    elif name == "friedman3":
        x, y = datasets.make_friedman3(n_samples=n, noise=0.5 * noise, random_state=dseed)
    else:
        x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    x = (x - x.mean(0)) / (x.std(0) + 1e-8)
    classify = name not in REGRESSION
    if not classify:
        y = (y - y.mean(0)) / (y.std(0) + 1e-8)
    return x.astype(np.float32), y, classify


def sample_config(rng: np.random.Generator, budget: float = 1.0, stream: str = "v1") -> dict:
    """One run's dataset, model and hyper-parameters (``budget`` scales the logged points).

    Stream ``v1`` draws exactly what the first library drew; ``v2`` adds warm-up + cosine,
    inverse-sqrt and step schedules, AdamW, larger batches and the held-out v2 datasets.
    """
    v2 = stream == "v2"
    name = weighted_choice(rng, STREAMS[stream])
    depth = int(rng.choice([0, 1, 1, 2, 2, 3]))
    opt = str(rng.choice(OPTIMIZERS_V2 if v2 else OPTIMIZERS))
    cfg: dict = {"dataset": name}
    if name in GENERATED:
        cfg |= {
            "n": int(rng.choice([200, 500, 1000, 2000])),
            "noise": round(rng.uniform(0.05, 0.5), 2),
            "dseed": int(rng.integers(100)),
        }
    cfg |= {
        "model": "linear" if depth == 0 else f"mlp-{int(rng.choice([8, 16, 32, 64, 128]))}x{depth}",
        "act": str(rng.choice(["relu", "tanh"])),
        "opt": opt,
        "lr": log_uniform(rng, *LR_RANGE[opt]),
        "sched": str(rng.choice(SCHEDULES_V2) if v2 else rng.choice(SCHEDULES, p=[0.6, 0.2, 0.2])),
        "bs": int(rng.choice([16, 32, 64, 128, 256] if v2 else [8, 16, 32, 64, 128])),
        "points": max(12, int(rng.integers(120, 201) * budget)),
        "every": int(rng.integers(2, 9)),
        "seed": int(rng.integers(10_000)),
    }
    return cfg


def run(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Train the configured model; (optimiser step, mean training loss) per logged point."""
    torch.manual_seed(cfg["seed"])
    x, y, classify = load_dataset(
        cfg["dataset"], cfg.get("n", 0), cfg.get("noise", 0.0), cfg.get("dseed", 0)
    )
    if classify:
        yt, n_out, loss_fn = (
            torch.as_tensor(y, dtype=torch.long),
            int(y.max()) + 1,
            nn.CrossEntropyLoss(),
        )
    else:
        yt = torch.as_tensor(y, dtype=torch.float32).reshape(len(y), -1)
        n_out, loss_fn = yt.shape[1], nn.MSELoss()
    if cfg["model"] == "linear":
        width, depth = 0, 0
    else:
        width, depth = (int(v) for v in cfg["model"][4:].split("x"))
    act = nn.ReLU if cfg["act"] == "relu" else nn.Tanh
    model = mlp(x.shape[1], width, depth, n_out, act)
    return train_supervised(
        model,
        torch.as_tensor(x),
        yt,
        loss_fn,
        cfg["opt"],
        cfg["lr"],
        cfg["sched"],
        min(cfg["bs"], len(x)),
        cfg["points"],
        cfg["every"],
        cfg["seed"],
    )
