"""Conditional flow matching in three small pieces: linear path, velocity net, ODE solver.

Noise ``x0 ~ N(0, I)`` flows to a (normalised) future trajectory ``x1`` along the linear
path ``x_t = (1 - t) x0 + t x1`` whose target velocity is ``x1 - x0`` (Lipman et al.,
rectified-flow / OT-CFM path with sigma_min = 0).  Sampling integrates the learned
velocity from t=0 to 1 with a fixed-step Euler or midpoint solver (:class:`Sampler`,
numpy, for inference; training uses torch).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mara_env.threads import single_threaded


@dataclass(frozen=True)
class FlowConfig:
    """Sizes of the velocity network (stored in the checkpoint header)."""

    cond_dim: int
    target_dim: int
    hidden: int = 256
    depth: int = 3
    cond_hidden: int = 128
    time_dim: int = 16

    def to_dict(self) -> dict[str, int]:
        """Plain dict for the checkpoint header."""
        return asdict(self)


def linear_path(
    x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_t, u_t)``: point on the straight path at time ``t`` (shape (B, 1)) and its velocity."""
    return (1.0 - t) * x0 + t * x1, x1 - x0


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features of ``t`` in [0, 1], shape (B, dim)."""
    k = torch.arange(dim // 2, dtype=t.dtype, device=t.device)
    freqs = torch.exp(k * (math.log(1000.0) / (dim // 2)))
    ang = t * freqs[None, :]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class VelocityNet(nn.Module):
    """MLP ``v(x_t, t, c)``; the condition is encoded once per sampling call."""

    def __init__(self, config: FlowConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.encoder = nn.Sequential(
            nn.Linear(c.cond_dim, c.cond_hidden),
            nn.SiLU(),
            nn.Linear(c.cond_hidden, c.cond_hidden),
            nn.SiLU(),
        )
        layers: list[nn.Module] = []
        n_in = c.target_dim + c.time_dim + c.cond_hidden
        for _ in range(c.depth):
            layers += [nn.Linear(n_in, c.hidden), nn.SiLU()]
            n_in = c.hidden
        layers.append(nn.Linear(n_in, c.target_dim))
        self.velocity = nn.Sequential(*layers)

    def encode(self, cond: torch.Tensor) -> torch.Tensor:
        """Condition embedding, shape (B, cond_hidden)."""
        return self.encoder(cond)

    def forward(self, x: torch.Tensor, t: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """Velocity at ``x`` (B, target_dim), time ``t`` (B, 1), encoded condition ``emb``."""
        return self.velocity(torch.cat([x, time_embedding(t, self.config.time_dim), emb], -1))


def cfm_loss(
    net: VelocityNet,
    x1: torch.Tensor,
    cond: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Conditional flow-matching loss on linear paths; ``mask`` drops unknown target dims.

    The noise and times are drawn on ``generator``'s device (the CPU's default generator
    when None) and moved to ``x1``'s: one seed gives the same draws on every device.
    """
    where = generator.device if generator is not None else torch.device("cpu")
    x0 = torch.randn(x1.shape, generator=generator, device=where).to(x1.device)
    t = torch.rand((x1.shape[0], 1), generator=generator, device=where).to(x1.device)
    xt, ut = linear_path(x0, x1, t)
    err = (net(xt, t, net.encode(cond)) - ut) ** 2 * mask
    return err.sum() / mask.sum().clamp_min(1.0)


def _silu_(h: np.ndarray) -> np.ndarray:
    """SiLU of ``h`` in place by the velocity net's own activation (``nn.SiLU``'s kernel,
    on the same memory): one vectorised pass where numpy takes four."""
    F.silu(torch.from_numpy(h), inplace=True)
    return h


class Sampler:
    """Fixed-step ODE solver of a trained :class:`VelocityNet`, in numpy (inference only).

    The layers are read from the torch module (every ``nn.Linear`` of its two
    ``nn.Sequential`` stacks, in order, with SiLU between), so the network has one
    definition.  numpy keeps per-call overhead far below torch's for the small batches of
    a scheduler tick.  The first layer is split: its condition term is computed once per
    task and its time term once per solver step (at construction), not per sample.
    """

    def __init__(self, net: VelocityNet, steps: int = 4, method: str = "euler") -> None:
        if method not in ("euler", "midpoint"):
            raise ValueError(f"unknown ODE method {method!r}; expected 'euler' or 'midpoint'")
        if steps < 1:
            raise ValueError(f"ODE steps must be >= 1, got {steps}")
        c = net.config
        self.steps, self.method = steps, method

        def params(seq: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
            return [
                (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
                for m in seq
                if isinstance(m, nn.Linear)
            ]

        self.encoder = params(net.encoder)
        layers = params(net.velocity)
        w0, self.b0 = layers[0]
        self.w_x = w0[: c.target_dim]
        self.w_c = w0[c.target_dim + c.time_dim :]
        times = (np.arange(2 * steps) / (2 * steps)).astype(np.float32)
        with torch.no_grad():
            temb = time_embedding(torch.as_tensor(times)[:, None], c.time_dim).numpy()
        self.t_terms = temb @ w0[c.target_dim : c.target_dim + c.time_dim]  # (2 steps, hidden)
        self.hidden = layers[1:-1]
        self.w_out, self.b_out = layers[-1]

    def _velocity(
        self, x: np.ndarray, first: np.ndarray, k: int, bufs: list[np.ndarray]
    ) -> np.ndarray:
        """Last hidden layer at ``x`` and solver time ``k`` (``first``: each task's first-layer
        condition term, one row per task; ``bufs``: two (rows, hidden) arrays, overwritten;
        the result is one of them)."""
        h, nxt = bufs
        np.dot(x, self.w_x, out=h)
        per_task = h.reshape(len(first), -1, h.shape[1])  # a view: rows are task-major
        per_task += (first + self.t_terms[k])[:, None]
        _silu_(h)
        for w, b in self.hidden:
            np.dot(h, w, out=nxt)
            nxt += b
            h, nxt = _silu_(nxt), h
        return h

    def __call__(self, cond: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Integrate from ``noise`` (S, target_dim) for each condition: (B, S, target_dim).

        The same noise serves every condition, so a task's samples depend only on its
        own condition (not on which other tasks share the batch).
        """
        with single_threaded():
            return self._integrate(cond, noise)

    def _integrate(self, cond: np.ndarray, noise: np.ndarray) -> np.ndarray:
        h = np.asarray(cond, np.float32)
        for w, b in self.encoder:
            h = h @ w
            h += b
            _silu_(h)
        b, s = len(h), len(noise)
        # 2-D contiguous rows (task-major): BLAS-friendly, unlike broadcast 3-D views.
        first = h @ self.w_c
        first += self.b0
        x = np.concatenate([np.asarray(noise, np.float32)] * b)
        bufs = [np.empty((b * s, len(self.b0)), np.float32) for _ in range(2)]
        w_out, b_out = self.w_out, self.b_out
        v = np.empty_like(x)
        dt = np.float32(1.0 / self.steps)
        for k in range(self.steps):
            np.dot(self._velocity(x, first, 2 * k, bufs), w_out, out=v)
            if self.method == "midpoint":
                v += b_out
                mid = self._velocity(x + 0.5 * dt * v, first, 2 * k + 1, bufs)
                np.dot(mid, w_out, out=v)
            v += b_out
            v *= dt
            x += v
        return x.reshape(b, s, -1)
