"""Experiment YAMLs: schema, typed sections, validation with errors that name the bad key.

An experiment file has these top-level keys (only ``name`` and ``env`` are required, and
they may come from a base file)::

    base: mara.yaml           # optional: start from this file (path relative to this one)
    name: mara                # run name: the directory OUT/<name> (letters, digits, . _ -)
    seed: 0                   # RLlib seed (env runners derive theirs from it)
    env: {...}                # ClusterConfig keys (mara_env.config.ClusterConfig)
    wrapper: flow             # none | flow | flow+deadline | task | wls: per-slot predictor
                              # features (task: the calibrated remaining-work model)
    wrapper_options: {...}    # keyword arguments of the predictor (FlowPredictor / WLSPredictor);
                              # flow+deadline, task: also teacher (a hedge spec), deadline_prior
    view: node                # node: one RLlib step per node decision (AEC env);
                              # round: one step per decision round of all nodes (RoundEnv)
    model: {...}              # ModelConfig keys (mara_agents.policy.network.ModelConfig)
    pretrain: {...}           # behaviour-cloning warm start (PretrainConfig), optional
    stop: {...}               # training_iteration | time_total_s | env_steps
    rllib: {method: {key: value}}  # overrides passed to PPOConfig.<method>(**kwargs)
    checkpoint: {...}         # CheckpointConfig keys
    train_loads: [1.0, 2.0]   # round view: training episodes take turns over these loads
                              # (default: env.load alone); cloning and evaluation use env.load
    train_jobs: [null, philly]  # round view: ... and over these workloads (null: the
                              # synthetic one; a jobs table as env.jobs), crossed with the loads
    advantage: {...}          # AdvantageConfig keys: PPO's advantage estimator (round view)
    warmup: {...}             # WarmupConfig keys: critic-only steps, then the actor's lr ramp
    critic: {...}             # CriticConfig keys: privileged columns only the critic reads
                              # (round view; training only: policy files hold none)

With ``base``, the file's mappings are merged key by key into the base's (chains of bases
work); any other value, ``null`` included, replaces the base's (``null``: the default).
A mapping tagged ``!replace`` replaces the base's mapping whole instead of merging.  Every
file of a chain is checked on its own, so an error names the file that holds the bad key.

Here: the typed sections, what each key must be, :func:`load_experiment`.  Elsewhere: the
rule language (:mod:`mara_agents.training.rules`), base chains and ``!replace``
(:mod:`mara_agents.training.bases`), what a run records and checks before it starts or
resumes (:mod:`mara_agents.training.records`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_predictor.wrapper import PRIOR_WRAPPERS, WRAPPERS
from mara_agents.planning.history import ClusterHistory
from mara_agents.training.bases import read_with_bases
from mara_agents.training.privileged import PRIVILEGED_FEATURES
from mara_agents.training.rules import (
    ANY,
    BOOL,
    COUNT,
    FRACTION,
    MAPPING,
    NON_NEGATIVE,
    NULL,
    NUMBER,
    POSITIVE,
    POSITIVE_INT,
    STRING,
    Rule,
    check_keys,
    is_int,
    is_number,
    one_of,
    rules_of,
)
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
    # What a DAgger round labels a node with: the teacher's action for it in the round's
    # start state ("round_start"), or that action made consistent with the nodes before
    # it, which the clone moved ("consistent": see clone.consistent_labels).
    dagger_labels: str = "round_start"
    # Start from these weights instead of cloning: a MaraNet state dict (a clone such as
    # runs/mara_pretrain.pt) or a policy file (`mara export`; its critic comes with it).
    # With dagger_rounds > 0 (and episodes 0) the DAgger rounds continue from them: the
    # policy drives, the teacher labels, and PPO (if any) starts from the result.
    init_weights: str = ""

    @property
    def clones(self) -> bool:
        """Whether the warm start is fitted here (``mara train --pretrain-only`` makes it):
        behaviour cloning from scratch, or DAgger rounds from ``init_weights``."""
        return self.episodes > 0 or bool(self.init_weights and self.dagger_rounds > 0)


# PPO's advantage estimators: RLlib's GAE with the critic, or a group-relative baseline of
# episodes that share a workload (mara_agents.training.group): returns, or GAE advantages, compared.
ESTIMATORS = ("gae", "group", "group_gae")
DAGGER_LABELS = ("round_start", "consistent")


@dataclass(frozen=True)
class AdvantageConfig:
    """How PPO estimates advantages: ``gae`` (RLlib's, with ``lambda_``), ``group`` or
    ``group_gae`` (round view: envs run in groups of ``group_size`` that share each
    workload; an episode's baseline is its group mates' return, or its GAE advantage is
    taken relative to theirs; see :mod:`mara_agents.training.group`)."""

    estimator: str = "gae"
    group_size: int = 8  # envs per group (group only); num_envs_per_env_runner must divide


@dataclass(frozen=True)
class WarmupConfig:
    """PPO's start from a warm policy (:mod:`mara_agents.training.learner`): for
    ``critic_steps`` env steps sampled (decision rounds in the round view) only the critic
    learns, then the actor's learning rate rises linearly from 0 to ``rllib.training.lr``
    over ``actor_ramp_steps``; the critic learns at ``critic_lr`` throughout (None:
    ``rllib.training.lr``).  All unset (default): one optimizer, full rate from the start."""

    critic_steps: int = 0
    actor_ramp_steps: int = 0
    # a critic with new inputs (critic.privileged, whose weights start at 0) learns to read
    # them within a warm-up only at a rate well above a fine-tuned actor's
    critic_lr: float | None = None

    @property
    def active(self) -> bool:
        """Whether the actor and the critic get an optimizer each."""
        return bool(self.critic_steps or self.actor_ramp_steps or self.critic_lr is not None)


@dataclass(frozen=True)
class CriticConfig:
    """What PPO's critic reads besides the global ``state``: ``privileged``, names of
    :data:`~mara_agents.training.privileged.PRIVILEGED_FEATURES` (``remaining_work``: each
    visible task's exact remaining work; ``arrivals_ahead``: the load arriving in the next
    ticks), which the simulator knows and the actor never sees
    (:mod:`mara_agents.training.privileged`; round view).  Empty (default): none."""

    privileged: tuple[str, ...] = ()


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
    # Workloads they cycle through too, crossed with the loads (None: the synthetic one).
    train_jobs: tuple[str | None, ...] = ()
    advantage: AdvantageConfig = AdvantageConfig()
    warmup: WarmupConfig = WarmupConfig()
    critic: CriticConfig = CriticConfig()
    path: str | None = None
    # the cluster's history, built once by whoever starts the run (``mara train``) and
    # handed to every env runner and teacher; None: read from ``env`` where one is read
    history: ClusterHistory | None = field(default=None, repr=False, compare=False)

    def env_config(self) -> dict[str, Any]:
        """The ``env_config`` handed to :func:`mara_agents.training.rllib_env.env_creator`."""
        cluster = {f.name: getattr(self.env, f.name) for f in dataclasses.fields(ClusterConfig)}
        config = {
            "cluster": cluster,
            "wrapper": self.wrapper,
            "wrapper_options": self.wrapper_options,
        }
        history = self.history
        if history is None and self.wrapper in PRIOR_WRAPPERS:  # its features read one
            history = ClusterHistory.of(self.env)
        if history is not None:
            config["history"] = history
        if self.train_loads:
            config["loads"] = list(self.train_loads)
        if self.train_jobs:
            config["jobs"] = list(self.train_jobs)
        if self.critic.privileged:
            config["privileged"] = list(self.critic.privileged)
        return config

    @property
    def teacher(self) -> str | None:
        """The spec of the scheduler whose plan the features read (flow+deadline and task
        only)."""
        if self.wrapper not in PRIOR_WRAPPERS:
            return None
        from mara_agents.policy.features import HEDGE_TEACHER

        return self.wrapper_options.get("teacher", HEDGE_TEACHER)

    @property
    def schedulers(self) -> list[str]:
        """The specs of the schedulers this run plays: the features' teacher, and the one
        the warm start clones."""
        cloned = [self.pretrain.scheduler] if self.pretrain.clones else []
        return [*([self.teacher] if self.teacher else []), *cloned]

    def tune_stop(self) -> dict[str, float]:
        """Stop criteria under Tune's result names."""
        return {STOP_KEYS[k]: v for k, v in self.stop.items()}


# ---- what each YAML value must be ----------------------------------------------------------
# RLlib takes a learning rate or coefficient schedule as [[timestep, value], ...]
SCHEDULE = Rule(
    lambda v: (
        isinstance(v, list)
        and bool(v)
        and all(isinstance(p, list) and len(p) == 2 and all(map(is_number, p)) for p in v)
    ),
    "a schedule [[timestep, value], ...]",
)
NAME = Rule(
    lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) is not None,
    "a run name of letters, digits, '.', '_' and '-' that starts with a letter or digit "
    "(it names the directory OUT/<name>)",
)
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
    "dagger_labels": one_of(DAGGER_LABELS),
}
CHECKPOINT_BOUNDS = {"frequency": COUNT, "keep": POSITIVE_INT}
ADVANTAGE_BOUNDS = {
    "estimator": one_of(ESTIMATORS),
    "group_size": Rule(lambda v: is_int(v) and v >= 2, "an integer >= 2"),
}
WARMUP_BOUNDS = {"critic_steps": COUNT, "actor_ramp_steps": COUNT, "critic_lr": POSITIVE | NULL}
CRITIC_BOUNDS = {
    "privileged": Rule(
        lambda v: (
            isinstance(v, list)
            and all(x in PRIVILEGED_FEATURES for x in v)
            and len(set(v)) == len(v)
        ),
        f"a list of distinct names among {list(PRIVILEGED_FEATURES)}",
    )
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
        "env": rules_of(ClusterConfig, {}),
        "model": rules_of(_model_config(), MODEL_BOUNDS),
        "pretrain": rules_of(PretrainConfig, PRETRAIN_BOUNDS),
        "checkpoint": rules_of(CheckpointConfig, CHECKPOINT_BOUNDS),
        "advantage": rules_of(AdvantageConfig, ADVANTAGE_BOUNDS),
        "warmup": rules_of(WarmupConfig, WARMUP_BOUNDS),
        "critic": rules_of(CriticConfig, CRITIC_BOUNDS),
        "stop": {k: POSITIVE for k in STOP_KEYS},
    }


TOP_LEVEL: dict[str, Rule] = {
    "name": NAME,
    "seed": COUNT,
    "env": MAPPING,
    "wrapper": one_of(WRAPPERS),
    "wrapper_options": MAPPING | NULL,
    "view": one_of(VIEWS),
    "model": MAPPING | NULL,
    "pretrain": MAPPING | NULL,
    "stop": Rule(lambda v: v is None or (isinstance(v, dict) and bool(v)), "a non-empty mapping"),
    "rllib": MAPPING | NULL,
    "checkpoint": MAPPING | NULL,
    "advantage": MAPPING | NULL,
    "warmup": MAPPING | NULL,
    "critic": MAPPING | NULL,
    "train_loads": Rule(
        lambda v: (
            v is None
            or (isinstance(v, list) and bool(v) and all(is_number(x) and 0 < x <= 100 for x in v))
        ),
        "a non-empty list of loads in (0, 100]",
    ),
    "train_jobs": Rule(
        lambda v: (
            v is None
            or (isinstance(v, list) and bool(v) and all(x is None or isinstance(x, str) for x in v))
        ),
        "a non-empty list of workloads (null: the synthetic one, or a jobs table as env.jobs)",
    ),
}


@functools.cache
def _ppo_defaults() -> Any:
    """RLlib's default ``PPOConfig``, or None where ray is not installed."""
    try:
        from ray.rllib.algorithms.ppo import PPOConfig
    except ModuleNotFoundError:
        return None
    return PPOConfig()


def _rllib_rule(method: str, key: str) -> Rule:
    """What an override of ``PPOConfig.<method>(key=...)`` must be."""
    if key in RLLIB_RULES.get(method, {}):
        return RLLIB_RULES[method][key]
    if _ppo_defaults() is None:
        return ANY
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
    """The ``rllib`` section: known methods, their keywords, and the values we know."""
    defaults = _ppo_defaults()
    for method, kwargs in values.items():
        if method not in RLLIB_METHODS:
            raise ConfigError(
                f"{where}: rllib: unknown method {method!r}; allowed methods: {list(RLLIB_METHODS)}"
            )
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}: rllib.{method}: expected a mapping of keyword arguments")
        # Without ray (cloning needs none) PPOConfig's keywords cannot be listed: training,
        # which needs ray, checks them when it loads the file.
        if defaults is not None:
            allowed = _method_keys(type(defaults), method)
            unknown = sorted(set(kwargs) - set(allowed), key=str)
            if unknown:
                raise ConfigError(
                    f"{where}: rllib.{method}: unknown key(s) {unknown}; allowed keys: {allowed}"
                )
        check_keys(kwargs, {k: _rllib_rule(method, k) for k in kwargs}, where, f"rllib.{method}")
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
    check_keys(data, top, where, "")
    for section, rules in _section_rules().items():
        if data.get(section) is not None:
            check_keys(data[section], rules, where, section)
    if data.get("rllib") is not None:
        _check_rllib(data["rllib"], where)


def _wrapper_rules(wrapper: str) -> dict[str, Rule]:
    """The keyword arguments a wrapper's predictor takes (``none`` takes none)."""
    if wrapper == "none":
        return {}
    if wrapper == "wls":
        from flow_predictor.wls import WLSPredictor

        return rules_of(WLSPredictor, WRAPPER_BOUNDS)
    from flow_predictor.checkpoint import load_predictor
    from flow_predictor.flow import FlowPredictor

    rules = {
        **rules_of(load_predictor, {}),
        **rules_of(FlowPredictor, WRAPPER_BOUNDS, skip=("net", "norm")),
    }
    if wrapper in PRIOR_WRAPPERS:  # the deadline prior's file (default: the shipped one)
        rules["deadline_prior"] = Rule(lambda v: isinstance(v, str) and bool(v), "a file path")
        rules["teacher"] = Rule(_hedge_spec, "a hedge teacher spec (hedge:key=value...)")
    return rules


def _hedge_spec(value: Any) -> bool:
    """Whether ``value`` is the spec of a hedge teacher (the plan flow+deadline and task read)."""
    from mara_agents.policy.features import TeacherPlan

    try:
        return isinstance(value, str) and TeacherPlan.from_spec(value).hedge is not None
    except ValueError:
        return False


def _check_teacher_agrees(
    cloned: Any, spec: str, wrapper: str, wrapper_options: dict[str, Any], where: str
) -> None:
    """A hedge that the warm start clones and that plans on the features' own predictions
    (its ``predictor`` is the wrapper, on the cluster's prior) is the features' teacher: the
    same knobs in ``pretrain.scheduler`` and ``wrapper_options.teacher``, one spec grammar
    for both."""
    from mara_agents.planning.history import CLUSTER
    from mara_agents.policy.features import HEDGE_TEACHER, TeacherPlan

    teacher = wrapper_options.get("teacher", HEDGE_TEACHER)
    own = getattr(cloned, "predictor", None) == wrapper
    if cloned.name != "hedge" or not own or cloned.prior_source != CLUSTER:
        return  # another planner labels (a privileged or a workload-prior teacher)
    if cloned.params != TeacherPlan.from_spec(teacher).hedge:
        raise ConfigError(
            f"{where}: pretrain.scheduler={spec!r} clones another hedge than the features' "
            f"teacher, wrapper_options.teacher={teacher!r}; expected the same knobs in both "
            "(write the one spec twice)"
        )


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
    check_keys(wrapper_options, _wrapper_rules(wrapper), where, f"wrapper_options ({wrapper})")
    pretrain = _section(PretrainConfig, data.get("pretrain"), f"{where}: pretrain")
    if pretrain.init_weights and pretrain.episodes > 0:
        raise ConfigError(
            f"{where}: pretrain: init_weights and episodes > 0 both set; "
            "expected one warm start (a state dict to load, or a teacher to clone; "
            "DAgger rounds from init_weights take episodes: 0)"
        )
    if pretrain.clones:
        from mara_agents.evaluation.registry import SpecError, make_scheduler

        try:
            cloned = make_scheduler(pretrain.scheduler)
        except SpecError as err:
            raise ConfigError(
                f"{where}: pretrain.scheduler={pretrain.scheduler!r}: {err}"
            ) from None
        if wrapper in PRIOR_WRAPPERS:
            _check_teacher_agrees(cloned, pretrain.scheduler, wrapper, wrapper_options, where)
    model = _section(_model_config(), data.get("model"), f"{where}: model")
    if model.attention_layers and model.hidden % model.heads:
        raise ConfigError(
            f"{where}: model.heads={model.heads}: expected a divisor of "
            f"model.hidden={model.hidden} (each attention head gets hidden / heads features)"
        )
    from mara_agents.policy.network import plan_gap_conflict

    conflict = plan_gap_conflict(model, wrapper != "none")
    if conflict:
        raise ConfigError(f"{where}: {conflict} (wrapper={wrapper!r})")
    try:
        env = ClusterConfig.from_dict(data["env"], where=f"{where}: env")
    except ConfigError as e:
        raise ConfigError(f"{where}: env: {e}") from None
    view = data.get("view", "node")
    train_loads = tuple(float(x) for x in data.get("train_loads") or ())
    train_jobs = tuple(data.get("train_jobs") or ())
    for key, mix, alone in (
        ("train_loads", train_loads, "at env.load"),
        ("train_jobs", train_jobs, "on env.jobs"),
    ):
        if mix and view != "round":
            raise ConfigError(
                f"{where}: {key}={list(mix)} with view={view!r}: "
                f"expected view 'round' (the node view trains {alone})"
            )
    for jobs in train_jobs:
        try:
            env.replace(jobs=jobs)
        except ConfigError as e:
            raise ConfigError(f"{where}: train_jobs: {e}") from None
    advantage = _section(AdvantageConfig, data.get("advantage"), f"{where}: advantage")
    if advantage.estimator != "gae" and view != "round":
        raise ConfigError(
            f"{where}: advantage.estimator={advantage.estimator!r} with view={view!r}: "
            "expected view 'round' "
            "(groups of envs share a workload round by round)"
        )
    critic = _section(CriticConfig, data.get("critic"), f"{where}: critic")
    if critic.privileged and view != "round":
        raise ConfigError(
            f"{where}: critic.privileged={list(critic.privileged)} with view={view!r}: "
            "expected view 'round' (the round env carries the critic's privileged columns)"
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
        train_jobs=train_jobs,
        advantage=advantage,
        warmup=_section(WarmupConfig, data.get("warmup"), f"{where}: warmup"),
        critic=critic,
    )


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML file (and its ``base`` chain)."""
    path = Path(path)
    data = read_with_bases(path, functools.partial(check_document, base_allowed=True))
    return dataclasses.replace(parse_experiment(data, where=str(path)), path=str(path.resolve()))
