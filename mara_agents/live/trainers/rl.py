"""The RL trainer: an actor-critic (REINFORCE with a learned baseline) on CartPole or
Acrobot."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from mara_agents.live.trainers.base import OptimConfig, TrainerBase, require
from mara_traces.common import mlp
from mara_traces.rl import RETURN_RANGE, obs_encoder

RL_ENVS = ("CartPole-v1", "Acrobot-v1")


@dataclass(frozen=True, kw_only=True)
class RLConfig(OptimConfig):
    """An actor-critic on a classic-control env; ``batch`` counts whole episodes."""

    lr: float = 3e-3
    sched: str = "const"
    batch: int = 8
    total_steps: int = 400
    env: str = "CartPole-v1"
    width: int = 32
    depth: int = 1
    gamma: float = 0.99
    vf: float = 0.5  # weight of the value loss
    ent: float = 0.01  # weight of the entropy bonus
    eval_episodes: int = 8  # fixed held-out episodes evaluate() plays

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.env in RL_ENVS, "env", self.env, f"one of {list(RL_ENVS)}")
        require(self.width >= 1, "width", self.width, "an integer >= 1")
        require(self.depth >= 1, "depth", self.depth, "an integer >= 1")
        require(0 <= self.gamma < 1, "gamma", self.gamma, "a discount in [0, 1)")
        require(self.eval_episodes >= 1, "eval_episodes", self.eval_episodes, "an integer >= 1")


class RLTrainer(TrainerBase):
    """REINFORCE with a learned baseline on whole episodes, one env copy per rank.

    Episode ``j`` of global batch ``t`` starts from a reset seeded by ``(seed, t, j)`` and
    samples its actions with noise from the same stream, so a rank playing its shard of the
    episodes plays exactly what one process would.  Each episode's loss is the mean over its
    steps of policy-gradient, value and entropy terms; returns are scaled by ``1 - gamma``.
    ``evaluate`` plays ``eval_episodes`` fixed held-out episodes (their own seed stream) and
    returns ``1 - normalised mean return``, the loss ``mara_traces.rl`` logs.
    """

    family = "rl"
    Config = RLConfig

    def __init__(self, config: RLConfig, seed: int):
        spec = gym.spec(config.env)
        self._max_len = int(spec.max_episode_steps)
        probe = gym.make(config.env)
        self._obs_dim, self._encode = obs_encoder(probe.observation_space)
        self._n_act = int(probe.action_space.n)
        probe.close()
        self._envs: dict[int, gym.vector.VectorEnv] = {}
        super().__init__(
            config,
            seed,
            lambda: nn.ModuleDict(
                {
                    "actor": mlp(self._obs_dim, config.width, config.depth, self._n_act, nn.Tanh),
                    "critic": mlp(self._obs_dim, config.width, config.depth, 1, nn.Tanh),
                }
            ),
        )

    def _env(self, k: int) -> gym.vector.VectorEnv:
        """A vector of ``k`` envs, each seeded per episode (built once per size)."""
        if k not in self._envs:
            self._envs[k] = gym.make_vec(self.config.env, num_envs=k, vectorization_mode="sync")
        return self._envs[k]

    def _play(
        self, episodes: np.ndarray, stream: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Observations, actions, rewards and live-step mask, each (time, episode)."""
        rngs = [np.random.default_rng([self.seed, *stream, int(j)]) for j in episodes]
        seeds = [int(rng.integers(2**31)) for rng in rngs]
        gumbel = np.stack([rng.gumbel(size=(self._max_len, self._n_act)) for rng in rngs], 1)
        noise = torch.as_tensor(gumbel, dtype=torch.float32)
        env = self._env(len(episodes))
        obs = torch.as_tensor(self._encode(env.reset(seed=seeds)[0]), dtype=torch.float32)
        live = np.ones(len(episodes), bool)
        trail: list[tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]] = []
        for t in range(self._max_len):
            with torch.no_grad():  # Gumbel-max: a categorical draw from the given noise
                act = (self.model["actor"](obs) + noise[t]).argmax(-1)
            nxt, reward, term, trunc, _ = env.step(act.numpy())
            trail.append((obs, act, reward * live, live))
            live = live & ~(term | trunc)
            if not live.any():
                break
            obs = torch.as_tensor(self._encode(nxt), dtype=torch.float32)
        obs_t, act_t, rew, mask = zip(*trail, strict=True)
        return torch.stack(obs_t), torch.stack(act_t), np.stack(rew), np.stack(mask)

    def shard_loss(self, rank: int, world: int) -> torch.Tensor:
        """This rank's episodes' summed losses over the global number of episodes."""
        self._check_shard(rank, world)
        cfg = self.config
        shard = np.array_split(np.arange(cfg.batch), world)[rank]
        obs, act, rew, mask = self._play(shard, (0, self.steps))
        ret = np.zeros_like(rew)
        running = np.zeros(rew.shape[1])
        for t in reversed(range(len(rew))):  # rewards after an episode's end are zero
            running = rew[t] + cfg.gamma * running
            ret[t] = running
        ret_t = torch.as_tensor(ret * (1.0 - cfg.gamma), dtype=torch.float32)
        logp_all = torch.log_softmax(self.model["actor"](obs), -1)
        logp = logp_all.gather(-1, act[..., None]).squeeze(-1)
        value = self.model["critic"](obs).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        per_step = (
            -logp * (ret_t - value.detach())
            + cfg.vf * 0.5 * (value - ret_t) ** 2
            - cfg.ent * entropy
        )
        live = torch.as_tensor(mask, dtype=torch.float32)
        per_episode = (per_step * live).sum(0) / live.sum(0)
        return per_episode.sum() / cfg.batch

    def evaluate(self) -> float:
        """1 - normalised mean return of the fixed held-out episodes, in [0, 1]."""
        _, _, rew, _ = self._play(np.arange(self.config.eval_episodes), (1,))
        lo, hi = RETURN_RANGE[self.config.env]
        return float(np.clip(1.0 - (rew.sum(0).mean() - lo) / (hi - lo), 0.0, 1.0))
