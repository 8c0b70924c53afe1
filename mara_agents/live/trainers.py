"""Trainers of live mode: real small training jobs that workers step data-parallel.

A trainer owns one job's model, optimiser and data.  Global batch number ``steps`` is a pure
function of ``(seed, steps)``, and a job on ``world`` workers splits that one batch among
them (strong scaling), so the loss-versus-steps curve does not depend on the allocation and
``state`` -> ``load`` -> continue is the uninterrupted run, bit for bit.  Each trainer
declares its hyper-parameters, with their defaults, in one frozen dataclass (``Config``).

The trainers reuse the trace collectors' data, models and schedules (``mara_traces``):

* ``tabular``: an MLP on an sklearn bundled or generated dataset;
* ``vision``: a small CNN on sklearn digits or procedurally drawn images;
* ``lm``: a byte-level causal transformer on Python's own documentation;
* ``rl``: an actor-critic (REINFORCE with a learned baseline) on CartPole or Acrobot.

The caller sets torch's thread count; nothing here does.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mara_traces import lm, tabular, vision
from mara_traces.common import (
    OPTIMIZERS,
    OPTIMIZERS_V2,
    SCHEDULES,
    SCHEDULES_V2,
    lr_factor,
    make_optimizer,
    mlp,
)
from mara_traces.rl import RETURN_RANGE, obs_encoder


class Trainer(Protocol):
    """One job's training state, stepped by :func:`train_step` on each of ``world`` ranks.

    A class satisfying it also has a dataclass ``Config`` of its hyper-parameters and is
    built as ``cls(config, seed)`` (see :func:`make_trainer`).  It may set a class
    attribute ``eval_every``: the steps between two evaluations of a job that does not set
    its own (default :data:`EVAL_EVERY`).
    """

    family: str  # 'tabular' | 'vision' | 'lm' | 'rl', as the trace families
    steps: int  # optimisation steps done so far (global, not per rank)
    model: nn.Module
    optimizer: torch.optim.Optimizer

    def shard_loss(self, rank: int, world: int) -> torch.Tensor:
        """Loss of this rank's shard of global batch ``steps``; the shards' sum is its mean."""
        ...

    def after_step(self) -> None:
        """Bookkeeping once the optimiser has stepped: ``steps += 1`` and the schedule."""
        ...

    def evaluate(self) -> float:
        """The held-out loss of the current model (lower is better)."""
        ...

    def state(self) -> bytes:
        """Everything the run needs to continue: model, optimiser, steps."""
        ...

    def load(self, blob: bytes) -> None:
        """Continue from a blob that :meth:`state` of the same trainer and config wrote."""
        ...


EVAL_EVERY = 10  # steps between evaluations of a trainer that does not say
METHODS = tuple(m for m, v in vars(Trainer).items() if callable(v) and not m.startswith("_"))
PROTOCOL = (*Trainer.__annotations__, *METHODS)  # the members a trainer must have
AllReduce = Callable[[list[torch.Tensor]], None]  # sums the tensors over ranks, in place


def train_step(
    trainer: Trainer, rank: int = 0, world: int = 1, allreduce: AllReduce | None = None
) -> float:
    """One optimisation step of ``trainer`` on its shard; returns the global batch's loss.

    With ``allreduce`` (an in-place SUM over the ``world`` ranks) every rank applies the
    gradient of the whole global batch, the one a single process would compute.  A loss
    that is NaN or infinite raises :class:`DivergedError` on every rank, before the step.
    """
    trainer.optimizer.zero_grad(set_to_none=True)
    loss = trainer.shard_loss(rank, world)
    loss.backward()
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:  # every rank must reduce the same list of tensors
            p.grad = torch.zeros_like(p)
    total = loss.detach().reshape(1).clone()  # summed with the gradients: ranks agree on it
    if allreduce is not None:
        allreduce([*(p.grad for p in params), total])
    finite_loss(float(total), trainer.steps, "training")
    trainer.optimizer.step()
    trainer.after_step()
    return float(total)


class DivergedError(FloatingPointError):
    """A job's loss is NaN or infinite: it has diverged and cannot reach any target."""


def finite_loss(loss: float, steps: int, what: str) -> float:
    """``loss``, unless it is NaN or infinite (then :class:`DivergedError` names the step)."""
    if not math.isfinite(loss):
        raise DivergedError(f"{what} loss is {loss} at step {steps}: the job diverged")
    return loss


def _require(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise ValueError(f"{key}={value!r}: expected {expected}")


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """The optimisation settings of every built-in trainer (each sets its defaults)."""

    opt: str = "adam"  # one of mara_traces.common's optimisers
    lr: float  # base learning rate
    sched: str  # one of mara_traces.common's schedules, laid over total_steps
    batch: int  # global batch (examples, windows or episodes), split over the ranks
    total_steps: int  # run length the schedule spans; later steps keep its end value

    def __post_init__(self) -> None:
        opts, scheds = sorted({*OPTIMIZERS, *OPTIMIZERS_V2}), sorted({*SCHEDULES, *SCHEDULES_V2})
        _require(self.opt in opts, "opt", self.opt, f"one of {opts}")
        _require(self.sched in scheds, "sched", self.sched, f"one of {scheds}")
        _require(self.lr > 0, "lr", self.lr, "a number > 0")
        _require(self.batch >= 1, "batch", self.batch, "an integer >= 1")
        _require(self.total_steps >= 1, "total_steps", self.total_steps, "an integer >= 1")


class TrainerBase:
    """Steps, schedule and checkpoints of the built-in trainers; subclasses add the data."""

    family: ClassVar[str]
    Config: ClassVar[type[OptimConfig]]
    eval_every: ClassVar[int] = EVAL_EVERY  # steps between evaluations, unless a job says

    def __init__(self, config: OptimConfig, seed: int, build: Callable[[], nn.Module]):
        self.config, self.seed, self.steps = config, seed, 0
        with torch.random.fork_rng(devices=[]):  # seeded init without moving the caller's RNG
            torch.manual_seed(seed)
            self.model = build()
        self.optimizer = make_optimizer(config.opt, self.model.parameters(), config.lr)
        self._set_lr()

    def _set_lr(self) -> None:
        frac = min(self.steps / self.config.total_steps, 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = float(self.config.lr * lr_factor(self.config.sched, frac))

    def _kind(self) -> str:
        return f"{type(self).__module__}:{type(self).__qualname__}"

    def _check_shard(self, rank: int, world: int) -> None:
        batch = self.config.batch
        _require(1 <= world <= batch, "world", world, f"an integer in 1..batch={batch}")
        _require(0 <= rank < world, "rank", rank, f"an integer in 0..{world - 1}")

    def after_step(self) -> None:
        """``steps += 1``; the learning rate of the next step from the schedule."""
        self.steps += 1
        self._set_lr()

    def state(self) -> bytes:
        """Model, optimiser and steps, with the trainer kind, config and seed that wrote them."""
        saved = {
            "kind": self._kind(),
            "config": dataclasses.asdict(self.config),
            "seed": self.seed,
            "steps": self.steps,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }
        buf = io.BytesIO()
        torch.save(saved, buf)
        return buf.getvalue()

    def load(self, blob: bytes) -> None:
        """Continue from ``blob``; refuses a corrupt blob or one of another trainer or config."""
        try:
            saved = torch.load(io.BytesIO(blob), weights_only=True)
        except Exception as err:  # torch raises many kinds on bad bytes; all mean "corrupt"
            why = (str(err).splitlines() or [""])[0][:120]
            raise ValueError(
                f"corrupt trainer state blob ({len(blob)} bytes): {type(err).__name__} {why}"
            ) from None
        keys = ("kind", "config", "seed", "steps", "model", "optimizer")
        if not isinstance(saved, dict) or any(k not in saved for k in keys):
            raise ValueError(f"trainer state blob ({len(blob)} bytes) lacks the keys {keys}")
        if saved["kind"] != self._kind():
            raise ValueError(f"the state is of trainer {saved['kind']!r}, not {self._kind()!r}")
        config = dataclasses.asdict(self.config)
        for key, value in config.items():
            if saved["config"].get(key) != value:
                got = saved["config"].get(key)
                raise ValueError(f"the state has {key}={got!r}, this trainer {key}={value!r}")
        if saved["seed"] != self.seed:
            raise ValueError(f"the state has seed={saved['seed']}, this trainer seed={self.seed}")
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.steps = int(saved["steps"])
        self._set_lr()


def _loss_sum(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy (integer targets) or squared error (float targets)."""
    if y.dtype == torch.long:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="sum")
    return F.mse_loss(out, y, reduction="sum")


class SupervisedTrainer(TrainerBase):
    """Minibatch training on a loss with a mean over target elements; a fixed held-out set.

    Subclasses say which examples global batch ``t`` holds (``_global_batch``) and what they
    are (``_examples``).
    """

    def __init__(
        self,
        config: OptimConfig,
        seed: int,
        build: Callable[[], nn.Module],
        held: tuple[torch.Tensor, torch.Tensor],
    ):
        self.x_held, self.y_held = held
        super().__init__(config, seed, build)

    def _global_batch(self, step: int) -> np.ndarray:
        """Identifiers of the examples of global batch ``step`` (a function of seed, step)."""
        raise NotImplementedError

    def _examples(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of the given examples."""
        raise NotImplementedError

    def shard_loss(self, rank: int, world: int) -> torch.Tensor:
        """This rank's share of the global batch's mean loss (per target element)."""
        self._check_shard(rank, world)
        batch = self._global_batch(self.steps)
        x, y = self._examples(np.array_split(batch, world)[rank])
        terms = len(batch) * self.y_held[0].numel()  # loss terms in the whole global batch
        return _loss_sum(self.model(x), y) / terms

    def evaluate(self) -> float:
        """Mean loss on the held-out set."""
        with torch.no_grad():
            return float(_loss_sum(self.model(self.x_held), self.y_held) / self.y_held.numel())


@dataclass(frozen=True, kw_only=True)
class DatasetConfig(OptimConfig):
    """A finite dataset of mara_traces and the split that holds part of it out."""

    dataset: str
    n: int  # examples of a generated or drawn dataset
    noise: float  # difficulty of a generated dataset, pixel noise of images
    dseed: int = 0  # generated data and held-out split
    held_out: float = 0.1  # fraction held out

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.n >= 10, "n", self.n, "an integer >= 10")
        _require(self.noise >= 0, "noise", self.noise, "a number >= 0")
        _require(0 < self.held_out < 1, "held_out", self.held_out, "a fraction in (0, 1)")


class DatasetTrainer(SupervisedTrainer):
    """A finite dataset split once into training and held-out rows.

    Global batch ``t`` is batch ``t mod e`` of epoch ``t // e`` (``e`` batches an epoch), each
    epoch a fresh permutation drawn from ``(seed, epoch)``.  Integer targets are classes
    (cross-entropy), float targets are regressed (squared error).
    """

    def __init__(
        self,
        config: DatasetConfig,
        seed: int,
        build: Callable[[int], nn.Module],
        xy: tuple[np.ndarray, np.ndarray],
    ):
        x, y = xy
        order = np.random.default_rng(config.dseed).permutation(len(x))
        cut = len(x) - max(1, round(config.held_out * len(x)))
        rows = f"an integer in 1..{cut} (the training rows)"
        _require(1 <= config.batch <= cut, "batch", config.batch, rows)
        xt = torch.as_tensor(x, dtype=torch.float32)
        if y.dtype.kind in "iub":
            yt, n_out = torch.as_tensor(y, dtype=torch.long), int(y.max()) + 1
        else:
            yt = torch.as_tensor(y, dtype=torch.float32).reshape(len(y), -1)
            n_out = yt.shape[1]
        train, held = torch.as_tensor(order[:cut]), torch.as_tensor(order[cut:])
        self.x_train, self.y_train = xt[train], yt[train]
        super().__init__(config, seed, lambda: build(n_out), (xt[held], yt[held]))

    def _global_batch(self, step: int) -> np.ndarray:
        n, b = len(self.x_train), self.config.batch
        epoch, pos = divmod(step, n // b)
        return np.random.default_rng([self.seed, epoch]).permutation(n)[pos * b : (pos + 1) * b]

    def _examples(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.as_tensor(idx)
        return self.x_train[rows], self.y_train[rows]


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
        _require(self.dataset in names, "dataset", self.dataset, f"one of {names}")
        _require(self.width >= 1, "width", self.width, "an integer >= 1")
        _require(self.depth >= 0, "depth", self.depth, "an integer >= 0")


class TabularTrainer(DatasetTrainer):
    """Classification or regression with :func:`mara_traces.common.mlp`."""

    family = "tabular"
    Config = TabularConfig

    def __init__(self, config: TabularConfig, seed: int):
        x, y, _ = tabular.load_dataset(config.dataset, config.n, config.noise, config.dseed)
        super().__init__(
            config, seed, lambda n_out: mlp(x.shape[1], config.width, config.depth, n_out), (x, y)
        )


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
        _require(self.dataset in names, "dataset", self.dataset, f"one of {names}")
        _require(self.channels >= 1, "channels", self.channels, "an integer >= 1")
        _require(self.depth >= 1, "depth", self.depth, "an integer >= 1")


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
        _require(self.corpus in names, "corpus", self.corpus, f"one of {names}")
        _require(self.ctx >= 1, "ctx", self.ctx, "an integer >= 1")
        _require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        ok = self.width >= 1 and self.width % self.heads == 0
        _require(ok, "width", self.width, f"a positive multiple of heads={self.heads}")
        _require(self.depth >= 1, "depth", self.depth, "an integer >= 1")
        _require(self.eval_windows >= 1, "eval_windows", self.eval_windows, "an integer >= 1")


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
        _require(self.env in RL_ENVS, "env", self.env, f"one of {list(RL_ENVS)}")
        _require(self.width >= 1, "width", self.width, "an integer >= 1")
        _require(self.depth >= 1, "depth", self.depth, "an integer >= 1")
        _require(0 <= self.gamma < 1, "gamma", self.gamma, "a discount in [0, 1)")
        _require(self.eval_episodes >= 1, "eval_episodes", self.eval_episodes, "an integer >= 1")


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


TRAINERS: dict[str, type] = {
    "tabular": TabularTrainer,
    "vision": VisionTrainer,
    "lm": LMTrainer,
    "rl": RLTrainer,
}


def trainer_class(name: str) -> type:
    """The class of a registered trainer, or of ``package.module:ClassName``, checked."""
    if name in TRAINERS:
        return TRAINERS[name]
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"unknown trainer {name!r}; expected one of {sorted(TRAINERS)} "
            "or an import path 'package.module:ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"trainer {name!r}: cannot import {module_name!r} ({err})") from None
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ValueError(f"trainer {name!r}: module {module_name!r} has no class {attr!r}")
    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        raise ValueError(f"trainer {name!r} needs a dataclass 'Config' of its parameters")
    missing = [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"trainer {name!r} lacks the Trainer methods {missing}")
    return cls


def default_eval_every(name: str) -> int:
    """Steps between a job's evaluations when its job file does not say: the trainer's."""
    return int(getattr(trainer_class(name), "eval_every", EVAL_EVERY))


def trainer_config(name: str, params: dict) -> object:
    """The trainer's ``Config`` from ``params`` (missing keys take their defaults), checked."""
    cls = trainer_class(name)
    hints = typing.get_type_hints(cls.Config)
    allowed = [f.name for f in dataclasses.fields(cls.Config) if f.init]
    values = {}
    for key, value in params.items():
        if key not in allowed:
            raise ValueError(f"unknown parameter {key!r} of trainer {name!r}; allowed: {allowed}")
        hint = hints.get(key)
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        wrong_bool = isinstance(value, bool) and hint is not bool
        if isinstance(hint, type) and (wrong_bool or not isinstance(value, hint)):
            raise ValueError(
                f"parameter {key!r} of trainer {name!r} must be {hint.__name__}, "
                f"not {type(value).__name__} {value!r}; allowed: {allowed}"
            )
        values[key] = value
    try:
        return cls.Config(**values)
    except ValueError as err:
        raise ValueError(f"trainer {name!r}: {err}") from None


def make_trainer(name: str, params: dict, seed: int) -> Trainer:
    """A fresh trainer: a name of :data:`TRAINERS` or ``package.module:ClassName``.

    ``params`` overrides the defaults of the trainer's ``Config``; unknown keys, wrong types
    and bad values raise ValueError naming the key.  A user's class is built as
    ``cls(config, seed)`` and must satisfy :class:`Trainer`.
    """
    ok = isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0
    _require(ok, "seed", seed, "an integer >= 0")  # numpy's seed streams need it
    cls = trainer_class(name)
    trainer = cls(trainer_config(name, params), seed)
    missing = [m for m in PROTOCOL if not hasattr(trainer, m)]
    if missing:
        raise ValueError(f"trainer {name!r} lacks the Trainer members {missing}")
    return trainer
