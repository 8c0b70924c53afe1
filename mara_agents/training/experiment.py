"""Experiment YAMLs: schema, typed sections, validation with errors that name the bad key.

An experiment file has these top-level keys (only ``name`` and ``env`` are required, and
they may come from a base file)::

    base: mara.yaml           # optional: start from this file (path relative to this one)
    name: mara                # run name: the directory OUT/<name> (letters, digits, . _ -)
    seed: 0                   # RLlib seed (env runners derive theirs from it)
    env: {...}                # ClusterConfig keys (mara_env.config.ClusterConfig)
    wrapper: flow             # none | flow | wls: per-slot predictor features
    wrapper_options: {...}    # keyword arguments of the predictor (FlowPredictor / WLSPredictor)
    view: node                # node: one RLlib step per node decision (AEC env);
                              # round: one step per decision round of all nodes (RoundEnv)
    model: {...}              # ModelConfig keys (mara_agents.policy.network.ModelConfig)
    pretrain: {...}           # behaviour-cloning warm start (PretrainConfig), optional
    stop: {...}               # training_iteration | time_total_s | env_steps
    rllib: {method: {key: value}}  # overrides passed to PPOConfig.<method>(**kwargs)
    checkpoint: {...}         # CheckpointConfig keys
    train_loads: [1.0, 2.0]   # round view: training episodes take turns over these loads
                              # (default: env.load alone); cloning and evaluation use env.load
    advantage: {...}          # AdvantageConfig keys: PPO's advantage estimator (round view)

With ``base``, the file's mappings are merged key by key into the base's (chains of bases
work); any other value, ``null`` included, replaces the base's (``null``: the default).
A mapping tagged ``!replace`` replaces the base's mapping whole instead of merging.  Every
file of a chain is checked on its own, so an error names the file that holds the bad key.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flow_predictor.wrapper import WRAPPERS
from mara_env.config import ClusterConfig, ConfigError

# PPOConfig methods an experiment may pass overrides to; the env, module, multi-agent
# mapping and callbacks are set by mara_agents.training.ppo from the other sections.
RLLIB_METHODS = (
    "env_runners",
    "training",
    "learners",
    "resources",
    "reporting",
    "debugging",
    "fault_tolerance",
)
# Keys of PPOConfig.training that would break the method's assumptions.
FIXED_TRAINING = {"gamma": 1.0}
STOP_KEYS = {
    "training_iteration": "training_iteration",
    "time_total_s": "time_total_s",
    "env_steps": "num_env_steps_sampled_lifetime",
}
# The record of the experiment a run was started with, inside its directory.
RECORD = "experiment.yaml"
# What one RLlib env step is: one node's decision (the AEC env through PettingZooEnv) or
# one decision round of all nodes (mara_env.round_env.RoundEnv, MaraRoundModule).
VIEWS = ("node", "round")


@dataclass(frozen=True)
class PretrainConfig:
    """Behaviour cloning of a heuristic scheduler before PPO (``episodes: 0`` disables it)."""

    scheduler: str = "edf"  # a scheduler spec, e.g. "uniform" or "flow_share:predictor=wls"
    episodes: int = 0  # env episodes of demonstrations
    epochs: int = 10  # passes over the demonstrations
    batch_size: int = 512
    lr: float = 1e-3
    value_epochs: int = 5  # critic regression on the demonstrations' returns
    # DAgger: the clone drives, the teacher labels the states it reaches, refit on all data.
    dagger_rounds: int = 0
    dagger_episodes: int = 30  # episodes the clone drives per round
    dagger_epochs: int = 4  # passes over all data after each round
    # Start PPO from these weights instead of cloning: a MaraNet state dict (a clone such as
    # runs/mara_pretrain.pt) or a policy file (`mara export`; its critic comes with it).
    init_weights: str = ""


# PPO's advantage estimators: RLlib's GAE with the critic, or a group-relative baseline of
# episodes that share a workload (mara_agents.training.group): returns, or GAE advantages, compared.
ESTIMATORS = ("gae", "group", "group_gae")


@dataclass(frozen=True)
class AdvantageConfig:
    """How PPO estimates advantages: ``gae`` (RLlib's, with ``lambda_``), ``group`` or
    ``group_gae`` (round view: envs run in groups of ``group_size`` that share each
    workload; an episode's baseline is its group mates' return, or its GAE advantage is
    taken relative to theirs; see :mod:`mara_agents.training.group`)."""

    estimator: str = "gae"
    group_size: int = 8  # envs per group (group only); num_envs_per_env_runner must divide


@dataclass(frozen=True)
class CheckpointConfig:
    """How often Tune checkpoints (training iterations) and how many it keeps."""

    frequency: int = 10
    keep: int = 3
    at_end: bool = True


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file."""

    name: str
    env: ClusterConfig
    seed: int = 0
    wrapper: str = "none"
    wrapper_options: dict[str, Any] = field(default_factory=dict)
    view: str = "node"
    model: dict[str, Any] = field(default_factory=dict)
    pretrain: PretrainConfig = PretrainConfig()
    stop: dict[str, float] = field(default_factory=lambda: {"training_iteration": 100})
    rllib: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoint: CheckpointConfig = CheckpointConfig()
    # Loads the training episodes cycle through (round view only; empty: ``env.load``).
    train_loads: tuple[float, ...] = ()
    advantage: AdvantageConfig = AdvantageConfig()
    path: str | None = None

    def env_config(self) -> dict[str, Any]:
        """The ``env_config`` handed to :func:`mara_agents.training.rllib_env.env_creator`."""
        cluster = {f.name: getattr(self.env, f.name) for f in dataclasses.fields(ClusterConfig)}
        config = {
            "cluster": cluster,
            "wrapper": self.wrapper,
            "wrapper_options": self.wrapper_options,
        }
        if self.train_loads:
            config["loads"] = list(self.train_loads)
        return config

    def tune_stop(self) -> dict[str, float]:
        """Stop criteria under Tune's result names."""
        return {STOP_KEYS[k]: v for k, v in self.stop.items()}


# ---- what each YAML value must be ----------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """What a YAML value must be: ``ok(value)``, described as ``expected``."""

    ok: Callable[[Any], bool]
    expected: str

    def __and__(self, other: Rule) -> Rule:
        return Rule(lambda v: self.ok(v) and other.ok(v), other.expected)

    def __or__(self, other: Rule) -> Rule:
        return Rule(lambda v: self.ok(v) or other.ok(v), f"{self.expected} or {other.expected}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


ANY = Rule(lambda v: True, "anything")
NULL = Rule(lambda v: v is None, "null")
BOOL = Rule(lambda v: isinstance(v, bool), "true or false")
STRING = Rule(lambda v: isinstance(v, str), "a string")
INTEGER = Rule(_is_int, "an integer")
NUMBER = Rule(_is_number, "a number")
MAPPING = Rule(lambda v: isinstance(v, dict), "a mapping")
POSITIVE_INT = Rule(lambda v: _is_int(v) and v > 0, "a positive integer")
COUNT = Rule(lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POSITIVE = Rule(lambda v: _is_number(v) and v > 0, "a positive number")
NON_NEGATIVE = Rule(lambda v: _is_number(v) and v >= 0, "a number >= 0")
FRACTION = Rule(lambda v: _is_number(v) and 0 <= v <= 1, "a number in [0, 1]")
# RLlib takes a learning rate or coefficient schedule as [[timestep, value], ...]
SCHEDULE = Rule(
    lambda v: (
        isinstance(v, list)
        and bool(v)
        and all(isinstance(p, list) and len(p) == 2 and all(map(_is_number, p)) for p in v)
    ),
    "a schedule [[timestep, value], ...]",
)
NAME = Rule(
    lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) is not None,
    "a run name of letters, digits, '.', '_' and '-' that starts with a letter or digit "
    "(it names the directory OUT/<name>)",
)


def rule_of(hint: Any) -> Rule:
    """The rule of a type hint: ``int``, ``float``, ``bool``, ``str``, unions, tuples."""
    simple = {bool: BOOL, int: INTEGER, float: NUMBER, str: STRING, type(None): NULL}
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rules = [rule_of(a) for a in args]
        return Rule(lambda v: any(r.ok(v) for r in rules), " or ".join(r.expected for r in rules))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = rule_of(args[0])
        return Rule(
            lambda v: isinstance(v, (list, tuple)) and all(item.ok(x) for x in v),
            f"a list of {item.expected.removeprefix('a ').removeprefix('an ')}s",
        )
    if origin is tuple:
        items = [rule_of(a) for a in args]
        return Rule(
            lambda v: (
                isinstance(v, (list, tuple))
                and len(v) == len(items)
                and all(r.ok(x) for r, x in zip(items, v))
            ),
            f"a list of {len(items)} ({', '.join(r.expected for r in items)})",
        )
    if origin is dict or hint is dict:
        return MAPPING
    if isinstance(hint, type):
        return Rule(lambda v: isinstance(v, hint), f"a {hint.__name__}")
    return ANY


def _rules(cls: Any, bounds: dict[str, Rule], skip: tuple[str, ...] = ()) -> dict[str, Rule]:
    """Each keyword of a dataclass or callable: its type hint's rule, narrowed by ``bounds``."""
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
    else:
        hints = typing.get_type_hints(cls.__init__ if inspect.isclass(cls) else cls)
    names = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip
    ]
    return {
        n: rule_of(hints.get(n, Any)) & bounds[n] if n in bounds else rule_of(hints.get(n, Any))
        for n in names
    }


MODEL_BOUNDS = {
    "hidden": POSITIVE_INT,
    "heads": POSITIVE_INT,
    "attention_layers": COUNT,
    "critic_hidden": POSITIVE_INT,
    "score_hidden": POSITIVE_INT,
    "value_scale": POSITIVE,
}
PRETRAIN_BOUNDS = {
    "episodes": COUNT,
    "epochs": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    "lr": POSITIVE,
    "value_epochs": COUNT,
    "dagger_rounds": COUNT,
    "dagger_episodes": POSITIVE_INT,
    "dagger_epochs": POSITIVE_INT,
}
CHECKPOINT_BOUNDS = {"frequency": COUNT, "keep": POSITIVE_INT}
ADVANTAGE_BOUNDS = {
    "estimator": Rule(lambda v: v in ESTIMATORS, f"one of {list(ESTIMATORS)}"),
    "group_size": Rule(lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
}
WRAPPER_BOUNDS = {"n_samples": POSITIVE_INT, "steps": POSITIVE_INT, "spread": POSITIVE}
# The PPOConfig overrides whose valid range we know; other keys get the type of their default.
RLLIB_RULES: dict[str, dict[str, Rule]] = {
    "training": {
        "lr": POSITIVE | SCHEDULE,
        "lambda_": FRACTION,
        "train_batch_size_per_learner": POSITIVE_INT,
        "minibatch_size": POSITIVE_INT,
        "num_epochs": POSITIVE_INT,
        "entropy_coeff": NON_NEGATIVE | SCHEDULE,
        "vf_loss_coeff": NON_NEGATIVE,
        "vf_clip_param": POSITIVE,
        "clip_param": POSITIVE,
        "grad_clip": POSITIVE | NULL,
        "kl_coeff": NON_NEGATIVE,
        "kl_target": POSITIVE,
    },
    "env_runners": {
        "num_env_runners": COUNT,
        "num_envs_per_env_runner": POSITIVE_INT,
        "rollout_fragment_length": POSITIVE_INT | Rule(lambda v: v == "auto", "'auto'"),
        "num_cpus_per_env_runner": NON_NEGATIVE,
    },
    "learners": {"num_learners": COUNT, "num_gpus_per_learner": NON_NEGATIVE},
}


def _model_config() -> type:
    from mara_agents.policy.network import ModelConfig

    return ModelConfig


def _section_rules() -> dict[str, dict[str, Rule]]:
    """Rules of every key of the mapping sections, by section."""
    return {
        "env": _rules(ClusterConfig, {}),
        "model": _rules(_model_config(), MODEL_BOUNDS),
        "pretrain": _rules(PretrainConfig, PRETRAIN_BOUNDS),
        "checkpoint": _rules(CheckpointConfig, CHECKPOINT_BOUNDS),
        "advantage": _rules(AdvantageConfig, ADVANTAGE_BOUNDS),
        "stop": {k: POSITIVE for k in STOP_KEYS},
    }


TOP_LEVEL: dict[str, Rule] = {
    "name": NAME,
    "seed": COUNT,
    "env": MAPPING,
    "wrapper": Rule(lambda v: v in WRAPPERS, f"one of {list(WRAPPERS)}"),
    "wrapper_options": MAPPING | NULL,
    "view": Rule(lambda v: v in VIEWS, f"one of {list(VIEWS)}"),
    "model": MAPPING | NULL,
    "pretrain": MAPPING | NULL,
    "stop": Rule(lambda v: v is None or (isinstance(v, dict) and bool(v)), "a non-empty mapping"),
    "rllib": MAPPING | NULL,
    "checkpoint": MAPPING | NULL,
    "advantage": MAPPING | NULL,
    "train_loads": Rule(
        lambda v: (
            v is None
            or (isinstance(v, list) and bool(v) and all(_is_number(x) and 0 < x <= 100 for x in v))
        ),
        "a non-empty list of loads in (0, 100]",
    ),
}


def _bad(where: str, key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{where}: {key}={value!r}: expected {expected}")


def _check_keys(values: dict[str, Any], rules: dict[str, Rule], where: str, path: str) -> None:
    """Unknown keys and values that break their rule, named by their key path."""
    unknown = sorted(set(values) - set(rules), key=str)
    if unknown:
        at = f"{path}: " if path else ""
        raise ConfigError(f"{where}: {at}unknown key(s) {unknown}; allowed keys: {list(rules)}")
    for key, value in values.items():
        if not rules[key].ok(value):
            raise _bad(where, f"{path}.{key}" if path else key, value, rules[key].expected)


@functools.cache
def _ppo_defaults() -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig

    return PPOConfig()


def _rllib_rule(method: str, key: str) -> Rule:
    if key in RLLIB_RULES.get(method, {}):
        return RLLIB_RULES[method][key]
    try:
        default = getattr(_ppo_defaults(), key, None)
    except ValueError:  # a deprecated property that raises
        return ANY
    if isinstance(default, bool):
        return BOOL | NULL
    if isinstance(default, (int, float)):
        return NUMBER | NULL
    if isinstance(default, str):
        return STRING | NULL
    return ANY


def _method_keys(cls: type, method: str) -> list[str]:
    """Keyword arguments ``cls.<method>`` accepts, including those it forwards to its bases."""
    keys: set[str] = set()
    for base in cls.__mro__:
        if method in vars(base):
            params = inspect.signature(vars(base)[method]).parameters.values()
            keys |= {
                p.name
                for p in params
                if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
            }
    return sorted(k for k in keys if k != "self" and not k.startswith("_"))


def _check_rllib(values: dict[str, Any], where: str) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    for method, kwargs in values.items():
        if method not in RLLIB_METHODS:
            raise ConfigError(
                f"{where}: rllib: unknown method {method!r}; allowed methods: {list(RLLIB_METHODS)}"
            )
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}: rllib.{method}: expected a mapping of keyword arguments")
        allowed = _method_keys(PPOConfig, method)
        unknown = sorted(set(kwargs) - set(allowed), key=str)
        if unknown:
            raise ConfigError(
                f"{where}: rllib.{method}: unknown key(s) {unknown}; allowed keys: {allowed}"
            )
        _check_keys(kwargs, {k: _rllib_rule(method, k) for k in kwargs}, where, f"rllib.{method}")
        if method == "training":
            for key, fixed in FIXED_TRAINING.items():
                if key in kwargs and kwargs[key] != fixed:
                    raise ConfigError(
                        f"{where}: rllib.training.{key}={kwargs[key]!r}: must be {fixed} "
                        "(undiscounted: the shaped return equals the completions)"
                    )


def check_document(data: Any, where: str, base_allowed: bool = False) -> None:
    """Check one YAML document: unknown keys and each value's type and range, by key path."""
    top = {**TOP_LEVEL, "base": STRING} if base_allowed else TOP_LEVEL
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {list(top)}")
    _check_keys(data, top, where, "")
    for section, rules in _section_rules().items():
        if data.get(section) is not None:
            _check_keys(data[section], rules, where, section)
    if data.get("rllib") is not None:
        _check_rllib(data["rllib"], where)


def _wrapper_rules(wrapper: str) -> dict[str, Rule]:
    """The keyword arguments a wrapper's predictor takes (``none`` takes none)."""
    if wrapper == "none":
        return {}
    if wrapper == "wls":
        from flow_predictor.wls import WLSPredictor

        return _rules(WLSPredictor, WRAPPER_BOUNDS)
    from flow_predictor.checkpoint import load_predictor
    from flow_predictor.flow import FlowPredictor

    return {
        **_rules(load_predictor, {}),
        **_rules(FlowPredictor, WRAPPER_BOUNDS, skip=("net", "norm")),
    }


def _section(cls: type, values: Any, where: str) -> Any:
    """A dataclass from a checked mapping (lists become tuples)."""
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in (values or {}).items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def parse_experiment(data: Any, where: str = "experiment") -> Experiment:
    """Validate a parsed YAML document (with no ``base``) into an :class:`Experiment`."""
    check_document(data, where)
    for key in ("name", "env"):
        if key not in data:
            raise ConfigError(f"{where}: missing required key {key!r}")
    wrapper = data.get("wrapper", "none")
    wrapper_options = data.get("wrapper_options") or {}
    _check_keys(wrapper_options, _wrapper_rules(wrapper), where, f"wrapper_options ({wrapper})")
    pretrain = _section(PretrainConfig, data.get("pretrain"), f"{where}: pretrain")
    if pretrain.init_weights and pretrain.episodes > 0:
        raise ConfigError(
            f"{where}: pretrain: init_weights and episodes > 0 both set; "
            "expected one warm start (a state dict to load, or a teacher to clone)"
        )
    if pretrain.episodes > 0:
        from mara_agents.evaluation.registry import SpecError, make_scheduler

        try:
            make_scheduler(pretrain.scheduler)
        except SpecError as err:
            raise ConfigError(
                f"{where}: pretrain.scheduler={pretrain.scheduler!r}: {err}"
            ) from None
    model = _section(_model_config(), data.get("model"), f"{where}: model")
    if model.attention_layers and model.hidden % model.heads:
        raise ConfigError(
            f"{where}: model.heads={model.heads}: expected a divisor of "
            f"model.hidden={model.hidden} (each attention head gets hidden / heads features)"
        )
    try:
        env = ClusterConfig.from_dict(data["env"], where=f"{where}: env")
    except ConfigError as e:
        raise ConfigError(f"{where}: env: {e}") from None
    view = data.get("view", "node")
    train_loads = tuple(float(x) for x in data.get("train_loads") or ())
    if train_loads and view != "round":
        raise ConfigError(
            f"{where}: train_loads={list(train_loads)} with view={view!r}: "
            "expected view 'round' (the node view trains at env.load)"
        )
    advantage = _section(AdvantageConfig, data.get("advantage"), f"{where}: advantage")
    if advantage.estimator != "gae" and view != "round":
        raise ConfigError(
            f"{where}: advantage.estimator={advantage.estimator!r} with view={view!r}: "
            "expected view 'round' "
            "(groups of envs share a workload round by round)"
        )
    return Experiment(
        name=data["name"],
        env=env,
        seed=data.get("seed", 0),
        wrapper=wrapper,
        wrapper_options=dict(wrapper_options),
        view=view,
        model=dataclasses.asdict(model),
        pretrain=pretrain,
        stop=dict(data.get("stop") or {"training_iteration": 100}),
        rllib={m: dict(kw) for m, kw in (data.get("rllib") or {}).items()},
        checkpoint=_section(CheckpointConfig, data.get("checkpoint"), f"{where}: checkpoint"),
        train_loads=train_loads,
        advantage=advantage,
    )


# ---- files, bases --------------------------------------------------------------------------
class Replace(dict):
    """A mapping tagged ``!replace``: it replaces the base's mapping instead of merging."""


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also knows the ``!replace`` tag."""


_Loader.add_constructor(
    "!replace", lambda loader, node: Replace(loader.construct_mapping(node, deep=True))
)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` merged into ``base``: mappings key by key, other values replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and not isinstance(value, Replace):
            if isinstance(out.get(key), dict):
                value = merge(out[key], value)
        out[key] = dict(value) if isinstance(value, dict) else value
    return out


def _read_document(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"experiment file {str(path)!r} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not a text file (byte {e.start} is not UTF-8); expected an experiment YAML"
        ) from None
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader with one more tag
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def resolve(path: str | Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The document at ``path`` with its ``base`` chain merged in; each file checked."""
    path = Path(path)
    if path.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, path))
        raise ConfigError(f"{path}: base cycle {cycle}; expected a chain of bases that ends")
    data = _read_document(path)
    check_document(data, str(path), base_allowed=True)
    if "base" not in data:
        return data
    base = path.parent / data["base"]
    if not base.is_file():
        raise ConfigError(f"{path}: base={data['base']!r}: no such file {str(base)!r}")
    own = {k: v for k, v in data.items() if k != "base"}
    return merge(resolve(base, (*chain, path.resolve())), own)


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML file (and its ``base`` chain)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment file {str(path)!r} does not exist")
    data = resolve(path)
    return dataclasses.replace(parse_experiment(data, where=str(path)), path=str(path.resolve()))


# ---- before a run: inputs, outputs, resume -------------------------------------------------
def check_inputs(exp: Experiment) -> None:
    """The files a run reads exist and load: ``env.traces`` (its split), ``init_weights``."""
    from mara_env.traces import TraceError, load_traces

    where = exp.path or "experiment"
    env = exp.env
    try:
        load_traces(env.traces, split=env.split, families=list(env.families or []))
    except TraceError as e:
        raise ConfigError(f"{where}: env.traces={env.traces!r}: {e}") from None
    init = exp.pretrain.init_weights
    if init and not Path(init).is_file():
        raise ConfigError(
            f"{where}: pretrain.init_weights={init!r}: no such file (expected a MaraNet state "
            "dict such as runs/mara_pretrain.pt from `mara train ... --pretrain-only`, or a "
            "policy file from `mara export`)"
        )


def check_out(out: str | Path) -> Path:
    """``out`` as an absolute path, once a directory can be made and written there."""
    out = Path(out).expanduser().absolute()
    for p in (out, *out.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise ConfigError(f"out={str(out)!r}: {p} is a file; expected a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"out={str(out)!r}: {p} is not writable")
        return out
    return out


def experiment_record(exp: Experiment) -> dict[str, Any]:
    """The experiment as plain YAML data (no file path): what a run records and compares."""
    data = {k: v for k, v in dataclasses.asdict(exp).items() if k != "path"}
    if not data["train_loads"]:  # runs recorded before the key existed compare equal
        del data["train_loads"]
    if data["advantage"] == dataclasses.asdict(AdvantageConfig()):  # likewise
        del data["advantage"]
    return yaml.safe_load(yaml.safe_dump(_plain(data)))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """``key.path: old -> new`` for every value that differs between two records."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for k in sorted(set(old) | set(new), key=str)
            for line in differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        ]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def write_record(exp: Experiment, record: Path, sections: tuple[str, ...] | None = None) -> None:
    """Write the experiment (or some of its top-level ``sections``) to ``record``."""
    data = experiment_record(exp)
    if sections is not None:
        data = {k: data[k] for k in sections}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        f"# The experiment this run started with ({exp.path or 'experiment'}); "
        "--resume refuses another.\n" + yaml.safe_dump(data, sort_keys=False)
    )


def check_unchanged(exp: Experiment, record: Path, free: tuple[str, ...] = ()) -> None:
    """Refuse to resume when ``exp`` differs from the experiment recorded at ``record``.

    ``free``: ``section.key`` names that may change between the run and its resumption.
    """
    if not record.is_file():
        return  # a run started before runs recorded their experiment
    old = yaml.safe_load(record.read_text())
    new = {k: v for k, v in experiment_record(exp).items() if k in old}
    for name in free:
        section, key = name.split(".")
        for data in (old, new):
            if isinstance(data.get(section), dict):
                data[section].pop(key, None)
    diff = differences(old, new)
    if diff:
        raise ConfigError(
            f"{exp.path or 'experiment'} differs from the run it would resume ({record}): "
            f"{'; '.join(diff)}; expected the same experiment (a run resumes with the settings "
            "it started with: restore them, or start a new run under another name or --out)"
        )
