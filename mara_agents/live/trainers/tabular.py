"""The tabular trainer: an MLP on one of mara_traces.tabular's datasets."""

from __future__ import annotations

from dataclasses import dataclass

from mara_agents.live.trainers.base import DatasetConfig, DatasetTrainer, require
from mara_traces import tabular
from mara_traces.common import mlp


@dataclass(frozen=True, kw_only=True)
class TabularConfig(DatasetConfig):
    """An MLP on one of mara_traces.tabular's datasets."""

    lr: float = 1e-3
    sched: str = "cosine"
    batch: int = 2048
    total_steps: int = 800
    dataset: str = "gaussian_quantiles"  # classes are shells of a 7-dimensional Gaussian
    n: int = 40_000
    noise: float = 0.5
    width: int = 256
    depth: int = 2  # hidden layers (0: a linear model)

    def __post_init__(self) -> None:
        super().__post_init__()
        names = sorted(tabular.V2_DATASET_WEIGHTS)
        require(self.dataset in names, "dataset", self.dataset, f"one of {names}")
        require(self.width >= 1, "width", self.width, "an integer >= 1")
        require(self.depth >= 0, "depth", self.depth, "an integer >= 0")


class TabularTrainer(DatasetTrainer):
    """Classification or regression with :func:`mara_traces.common.mlp`."""

    family = "tabular"
    Config = TabularConfig

    def __init__(self, config: TabularConfig, seed: int):
        x, y, _ = tabular.load_dataset(config.dataset, config.n, config.noise, config.dseed)
        super().__init__(
            config, seed, lambda n_out: mlp(x.shape[1], config.width, config.depth, n_out), (x, y)
        )
