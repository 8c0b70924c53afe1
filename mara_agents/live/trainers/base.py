"""What every live-mode trainer is and shares: the :class:`Trainer` protocol, one step
(:func:`train_step`), the optimisation settings (:class:`OptimConfig`) and the built-in
trainers' base classes (steps, schedule, checkpoints; supervised and finite-dataset
training).

Global batch number ``steps`` is a pure function of ``(seed, steps)``, and a job on
``world`` workers splits that one batch among them (strong scaling), so the
loss-versus-steps curve does not depend on the allocation and ``state`` -> ``load`` ->
continue is the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mara_traces.common import (
    OPTIMIZERS,
    OPTIMIZERS_V2,
    SCHEDULES,
    SCHEDULES_V2,
    lr_factor,
    make_optimizer,
)


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


def require(ok: bool, key: str, value: object, expected: str) -> None:
    """ValueError naming ``key``, its ``value`` and what was ``expected``, unless ``ok``."""
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
        require(self.opt in opts, "opt", self.opt, f"one of {opts}")
        require(self.sched in scheds, "sched", self.sched, f"one of {scheds}")
        require(self.lr > 0, "lr", self.lr, "a number > 0")
        require(self.batch >= 1, "batch", self.batch, "an integer >= 1")
        require(self.total_steps >= 1, "total_steps", self.total_steps, "an integer >= 1")


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
        require(1 <= world <= batch, "world", world, f"an integer in 1..batch={batch}")
        require(0 <= rank < world, "rank", rank, f"an integer in 0..{world - 1}")

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
        require(self.n >= 10, "n", self.n, "an integer >= 10")
        require(self.noise >= 0, "noise", self.noise, "a number >= 0")
        require(0 < self.held_out < 1, "held_out", self.held_out, "a fraction in (0, 1)")


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
        require(1 <= config.batch <= cut, "batch", config.batch, rows)
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
