"""Experiment YAMLs: schema, typed sections, validation with errors that name the bad key.

An experiment file has these top-level keys (only ``name`` and ``env`` are required)::

    name: mara                # run name (Tune trial directory prefix)
    algorithm: PPO            # the only algorithm supported
    seed: 0                   # RLlib seed (env runners derive theirs from it)
    env: {...}                # ClusterConfig keys (mara_env.config.ClusterConfig)
    wrapper: flow             # none | flow | wls: per-slot predictor features
    wrapper_options: {...}    # keyword arguments of the flow-predictor wrapper
    model: {...}              # ModelConfig keys (mara_agents.rl_module.ModelConfig)
    pretrain: {...}           # behaviour-cloning warm start (PretrainConfig), optional
    stop: {...}               # training_iteration | time_total_s | env_steps
    rllib: {method: {key: value}}  # overrides passed to PPOConfig.<method>(**kwargs)
    checkpoint: {...}         # CheckpointConfig keys
    evaluation: {...}         # EvaluationConfig keys (used by `mara evaluate`)
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mara_env.config import ClusterConfig, ConfigError

WRAPPERS = ("none", "flow", "wls")
ALGORITHMS = ("PPO",)
# PPOConfig methods an experiment may pass overrides to; the env, module, multi-agent
# mapping and callbacks are set by mara_agents.train from the other sections.
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
    # Start PPO from this MaraNet state dict (e.g. runs/mara_pretrain_bc.pt) instead of cloning.
    init_weights: str = ""


@dataclass(frozen=True)
class CheckpointConfig:
    """How often Tune checkpoints (training iterations) and how many it keeps."""

    frequency: int = 10
    keep: int = 3
    at_end: bool = True


@dataclass(frozen=True)
class EvaluationConfig:
    """How `mara evaluate` / the results pages evaluate the trained policy."""

    split: str = "test"
    episodes: int = 30
    loads: tuple[float, ...] = (1.0, 1.5, 2.0)
    seed: int = 0
    baselines: tuple[str, ...] = ("lara", "edf")


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file."""

    name: str
    env: ClusterConfig
    algorithm: str = "PPO"
    seed: int = 0
    wrapper: str = "none"
    wrapper_options: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    pretrain: PretrainConfig = PretrainConfig()
    stop: dict[str, float] = field(default_factory=lambda: {"training_iteration": 100})
    rllib: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoint: CheckpointConfig = CheckpointConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    path: str | None = None

    def env_config(self) -> dict[str, Any]:
        """The ``env_config`` handed to :func:`mara_agents.rllib_env.env_creator`."""
        cluster = {
            f.name: getattr(self.env, f.name)
            for f in dataclasses.fields(ClusterConfig)
            if f.name != "extra"
        }
        return {
            "cluster": cluster,
            "wrapper": self.wrapper,
            "wrapper_options": self.wrapper_options,
        }

    def tune_stop(self) -> dict[str, float]:
        """Stop criteria under Tune's result names."""
        return {STOP_KEYS[k]: v for k, v in self.stop.items()}


def _section(cls: type, values: Any, where: str) -> Any:
    """A dataclass from a mapping, naming unknown keys and the allowed ones."""
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys: {allowed}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


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


def _check_rllib(values: Any, where: str) -> dict[str, dict[str, Any]]:
    from ray.rllib.algorithms.ppo import PPOConfig

    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping of PPOConfig method -> keyword arguments")
    for method, kwargs in values.items():
        if method not in RLLIB_METHODS:
            raise ConfigError(
                f"{where}: unknown method {method!r}; allowed methods: {list(RLLIB_METHODS)}"
            )
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}.{method}: expected a mapping of keyword arguments")
        allowed = _method_keys(PPOConfig, method)
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ConfigError(
                f"{where}.{method}: unknown key(s) {unknown}; allowed keys: {allowed}"
            )
        if method == "training":
            for key, fixed in FIXED_TRAINING.items():
                if key in kwargs and kwargs[key] != fixed:
                    raise ConfigError(
                        f"{where}.training.{key}={kwargs[key]!r}: must be {fixed} "
                        "(undiscounted: the shaped return equals the completions)"
                    )
    return {m: dict(kw) for m, kw in values.items()}


def _check_model(values: Any, where: str) -> dict[str, Any]:
    from mara_agents.rl_module import ModelConfig

    return dataclasses.asdict(_section(ModelConfig, values, where))


def _check_stop(values: Any, where: str) -> dict[str, float]:
    if values is None:
        return {"training_iteration": 100}
    if not isinstance(values, dict) or not values:
        raise ConfigError(f"{where}: expected a non-empty mapping; allowed keys: {list(STOP_KEYS)}")
    unknown = sorted(set(values) - set(STOP_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys: {list(STOP_KEYS)}")
    for k, v in values.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise ConfigError(f"{where}.{k}={v!r}: expected a positive number")
    return dict(values)


TOP_LEVEL = (
    "name",
    "algorithm",
    "seed",
    "env",
    "wrapper",
    "wrapper_options",
    "model",
    "pretrain",
    "stop",
    "rllib",
    "checkpoint",
    "evaluation",
)


def parse_experiment(data: Any, where: str = "experiment") -> Experiment:
    """Validate a parsed YAML document into an :class:`Experiment`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {list(TOP_LEVEL)}")
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys: {list(TOP_LEVEL)}")
    for key in ("name", "env"):
        if key not in data:
            raise ConfigError(f"{where}: missing required key {key!r}")
    name = data["name"]
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"{where}: name={name!r}: expected a non-empty string without '/'")
    algorithm = data.get("algorithm", "PPO")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"{where}: algorithm={algorithm!r}: expected one of {list(ALGORITHMS)}")
    wrapper = data.get("wrapper", "none")
    if wrapper not in WRAPPERS:
        raise ConfigError(f"{where}: wrapper={wrapper!r}: expected one of {list(WRAPPERS)}")
    if not isinstance(data["env"], dict):
        raise ConfigError(f"{where}: env: expected a mapping of ClusterConfig keys")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"{where}: seed={seed!r}: expected an integer")
    wrapper_options = data.get("wrapper_options") or {}
    if not isinstance(wrapper_options, dict):
        raise ConfigError(f"{where}: wrapper_options: expected a mapping")
    pretrain = _section(PretrainConfig, data.get("pretrain"), f"{where}: pretrain")
    if pretrain.init_weights:
        if pretrain.episodes > 0:
            raise ConfigError(
                f"{where}: pretrain: init_weights and episodes > 0 both set; "
                "expected one warm start (a state dict to load, or a teacher to clone)"
            )
    if pretrain.episodes > 0:
        from mara_agents.harness import SpecError, make_scheduler

        try:
            make_scheduler(pretrain.scheduler)
        except SpecError as err:
            raise ConfigError(
                f"{where}: pretrain.scheduler={pretrain.scheduler!r}: {err}"
            ) from None
    return Experiment(
        name=name,
        env=ClusterConfig.from_dict(data["env"], where=f"{where}: env"),
        algorithm=algorithm,
        seed=seed,
        wrapper=wrapper,
        wrapper_options=dict(wrapper_options),
        model=_check_model(data.get("model"), f"{where}: model"),
        pretrain=pretrain,
        stop=_check_stop(data.get("stop"), f"{where}: stop"),
        rllib=_check_rllib(data.get("rllib"), f"{where}: rllib"),
        checkpoint=_section(CheckpointConfig, data.get("checkpoint"), f"{where}: checkpoint"),
        evaluation=_section(EvaluationConfig, data.get("evaluation"), f"{where}: evaluation"),
    )


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return dataclasses.replace(parse_experiment(data, where=str(path)), path=str(path.resolve()))
