"""A monotone quantile network: features in, a whole quantile curve out, fitted by pinball loss.

The network maps standardised features to the first quantile and the positive gaps
between the next ones (softplus), so every output curve is ascending by construction.
Its loss is the mean pinball (quantile) loss over :data:`levels`, whose minimiser is the
true conditional quantile at each level, so the curve is the model's conditional
distribution read at those levels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class QuantileNetConfig:
    """The network's shape and its training (every knob once, with its default)."""

    hidden: int = 128
    depth: int = 2
    epochs: int = 40
    batch_size: int = 1024
    lr: float = 2e-3
    weight_decay: float = 1e-5
    patience: int = 6  # epochs without a better validation loss before stopping
    seed: int = 0

    def as_dict(self) -> dict:
        """Plain values, for a checkpoint's header."""
        return asdict(self)


class QuantileNet(nn.Module):
    """Features (standardised inside with the stored ``mean``/``std``) to ``n_levels``
    ascending quantiles."""

    def __init__(self, n_features: int, n_levels: int, hidden: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = n_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_levels)
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(self.body((x - self.mean) / self.std))
        gaps = nn.functional.softplus(out[:, 1:]) + 1e-4
        return torch.cat([out[:, :1], out[:, :1] + torch.cumsum(gaps, dim=1)], dim=1)

    @torch.no_grad()
    def curves(self, x: np.ndarray) -> np.ndarray:
        """(rows x levels) quantile curves of feature rows ``x`` (numpy in, numpy out)."""
        if not len(x):
            return np.zeros((0, self.head.out_features))
        t = torch.as_tensor(np.asarray(x, np.float32), device=self.mean.device)
        return self(t).cpu().numpy().astype(np.float64)


def pinball(pred: torch.Tensor, y: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss of quantile curves ``pred`` (rows x levels) at truths ``y``."""
    diff = y[:, None] - pred
    return torch.maximum(levels * diff, (levels - 1) * diff).mean()


def fit_quantile_net(
    x: np.ndarray,
    y: np.ndarray,
    levels: np.ndarray,
    config: QuantileNetConfig,
    x_val: np.ndarray,
    y_val: np.ndarray,
    device: str = "cpu",
    progress: bool = True,
) -> tuple[QuantileNet, dict]:
    """The network fitted on ``(x, y)``, keeping the epoch with the lowest pinball loss
    on ``(x_val, y_val)``; and the training record (losses per epoch)."""
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    net = QuantileNet(x.shape[1], len(levels), config.hidden, config.depth).to(device)
    std = x.std(axis=0)
    net.mean.copy_(torch.as_tensor(x.mean(axis=0), dtype=torch.float32))
    net.std.copy_(torch.as_tensor(np.where(std > 1e-8, std, 1.0), dtype=torch.float32))
    xt = torch.as_tensor(x, dtype=torch.float32, device=device)
    yt = torch.as_tensor(y, dtype=torch.float32, device=device)
    xv = torch.as_tensor(x_val, dtype=torch.float32, device=device)
    yv = torch.as_tensor(y_val, dtype=torch.float32, device=device)
    lv = torch.as_tensor(levels, dtype=torch.float32, device=device)
    opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps = max(1, len(x) // config.batch_size)  # per epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, config.lr, total_steps=config.epochs * steps)
    best, best_state, stale, record = np.inf, None, 0, []
    epochs = range(config.epochs)
    if progress:
        from tqdm import tqdm

        epochs = tqdm(epochs, desc="remaining-work model", unit="epoch")
    for epoch in epochs:
        net.train()
        order = torch.as_tensor(rng.permutation(len(x)), device=device)
        total = 0.0
        for i in range(steps):
            idx = order[i * config.batch_size : (i + 1) * config.batch_size]
            loss = pinball(net(xt[idx]), yt[idx], lv)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach())
        net.eval()
        with torch.no_grad():
            val = float(pinball(net(xv), yv, lv))
        record.append({"epoch": epoch, "train": total / steps, "val": val})
        if val < best:
            best, stale = val, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        else:
            stale += 1
            if stale >= config.patience:
                break
    net.load_state_dict(best_state)
    return net.cpu().eval(), {"epochs": record, "best_val": best}
