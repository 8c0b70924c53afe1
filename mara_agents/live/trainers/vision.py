"""The vision trainer: a small CNN on one of mara_traces.vision's image generators."""

from __future__ import annotations

from dataclasses import dataclass

from mara_agents.live.trainers.base import DatasetConfig, DatasetTrainer, require
from mara_traces import vision


@dataclass(frozen=True, kw_only=True)
class VisionConfig(DatasetConfig):
    """A small CNN on one of mara_traces.vision's image generators (digits: its 1797)."""

    lr: float = 3e-3
    sched: str = "cosine"
    batch: int = 256
    total_steps: int = 600
    dataset: str = "shapes"
    n: int = 10_000
    noise: float = 0.3
    channels: int = 16  # of the first conv block, doubling in each next one
    depth: int = 2  # conv blocks

    def __post_init__(self) -> None:
        super().__post_init__()
        names = sorted(vision.V2_DATASET_WEIGHTS)
        require(self.dataset in names, "dataset", self.dataset, f"one of {names}")
        require(self.channels >= 1, "channels", self.channels, "an integer >= 1")
        require(self.depth >= 1, "depth", self.depth, "an integer >= 1")


class VisionTrainer(DatasetTrainer):
    """Image classification with :class:`mara_traces.vision.ConvNet`."""

    family = "vision"
    Config = VisionConfig
    eval_every = 20  # its held-out set takes about as long as 5 training steps

    def __init__(self, config: VisionConfig, seed: int):
        x, y = vision.load_images(config.dataset, config.n, config.noise, config.dseed)
        side = x.shape[-1]
        super().__init__(
            config,
            seed,
            lambda n_out: vision.ConvNet(side, config.channels, config.depth, n_out),
            (x, y),
        )
