"""The language-model trainer: a byte-level causal transformer on one of mara_traces.lm's
corpora."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mara_agents.live.trainers.base import OptimConfig, SupervisedTrainer, require
from mara_traces import lm


@dataclass(frozen=True, kw_only=True)
class LMConfig(OptimConfig):
    """A byte-level causal transformer on one of mara_traces.lm's corpora."""

    lr: float = 3e-3
    sched: str = "warmup_cosine"
    batch: int = 32  # windows
    total_steps: int = 800
    corpus: str = "prose-pydoc-topics"
    ctx: int = 48  # bytes a window predicts
    width: int = 48
    depth: int = 2
    heads: int = 4
    eval_windows: int = 32  # fixed, evenly spaced held-out windows

    def __post_init__(self) -> None:
        super().__post_init__()
        names = list(lm.CORPORA)
        require(self.corpus in names, "corpus", self.corpus, f"one of {names}")
        require(self.ctx >= 1, "ctx", self.ctx, "an integer >= 1")
        require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        ok = self.width >= 1 and self.width % self.heads == 0
        require(ok, "width", self.width, f"a positive multiple of heads={self.heads}")
        require(self.depth >= 1, "depth", self.depth, "an integer >= 1")
        require(self.eval_windows >= 1, "eval_windows", self.eval_windows, "an integer >= 1")


class LMTrainer(SupervisedTrainer):
    """Next-byte prediction; the corpus's last :data:`mara_traces.lm.HELD_OUT` is held out.

    Global batch ``t`` is ``batch`` windows at offsets drawn from ``(seed, t)``.
    """

    family = "lm"
    Config = LMConfig

    def __init__(self, config: LMConfig, seed: int):
        text = torch.as_tensor(lm.corpus_bytes(config.corpus), dtype=torch.long)
        cut = int(len(text) * (1.0 - lm.HELD_OUT))
        self.text, held = text[:cut], text[cut:]
        self._offsets = torch.arange(config.ctx + 1)
        starts = torch.linspace(0, len(held) - config.ctx - 2, config.eval_windows).long()
        windows = held[starts[:, None] + self._offsets]
        super().__init__(
            config,
            seed,
            lambda: lm.CausalTransformer(config.width, config.depth, config.heads, config.ctx),
            (windows[:, :-1], windows[:, 1:]),
        )

    def _global_batch(self, step: int) -> np.ndarray:
        """Start offsets of the windows of global batch ``step``."""
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, len(self.text) - self.config.ctx - 1, self.config.batch)

    def _examples(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        windows = self.text[torch.as_tensor(idx)[:, None] + self._offsets]
        return windows[:, :-1], windows[:, 1:]
