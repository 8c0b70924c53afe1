"""Trainers of live mode: real small training jobs that workers step data-parallel.

A trainer owns one job's model, optimiser and data, and satisfies the :class:`Trainer`
protocol (:mod:`~mara_agents.live.trainers.base`, with the built-in trainers' base
classes).  Each trainer declares its hyper-parameters, with their defaults, in one frozen
dataclass (``Config``).  This module is the registry (:data:`TRAINERS`, or a user's class
by import path).  The built-in trainers, one family per module, reuse the trace
collectors' data, models and schedules (``mara_traces``):

* ``tabular`` (:mod:`.tabular`): an MLP on an sklearn bundled or generated dataset;
* ``vision`` (:mod:`.vision`): a small CNN on sklearn digits or procedurally drawn images;
* ``lm`` (:mod:`.lm`): a byte-level causal transformer on Python's own documentation;
* ``rl`` (:mod:`.rl`): an actor-critic (REINFORCE with a learned baseline) on CartPole or
  Acrobot.

The caller sets torch's thread count; nothing here does.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing

from mara_agents.live.trainers.base import (
    EVAL_EVERY,
    METHODS,
    PROTOCOL,
    DivergedError,
    OptimConfig,
    Trainer,
    TrainerBase,
    finite_loss,
    require,
    train_step,
)
from mara_agents.live.trainers.lm import LMConfig, LMTrainer
from mara_agents.live.trainers.rl import RLConfig, RLTrainer
from mara_agents.live.trainers.tabular import TabularConfig, TabularTrainer
from mara_agents.live.trainers.vision import VisionConfig, VisionTrainer

__all__ = [
    "EVAL_EVERY",
    "TRAINERS",
    "DivergedError",
    "LMConfig",
    "LMTrainer",
    "OptimConfig",
    "RLConfig",
    "RLTrainer",
    "TabularConfig",
    "TabularTrainer",
    "Trainer",
    "TrainerBase",
    "VisionConfig",
    "VisionTrainer",
    "default_eval_every",
    "finite_loss",
    "make_trainer",
    "train_step",
    "trainer_class",
    "trainer_config",
]


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
    require(ok, "seed", seed, "an integer >= 0")  # numpy's seed streams need it
    cls = trainer_class(name)
    trainer = cls(trainer_config(name, params), seed)
    missing = [m for m in PROTOCOL if not hasattr(trainer, m)]
    if missing:
        raise ValueError(f"trainer {name!r} lacks the Trainer members {missing}")
    return trainer
