"""The policy's observation: the predictor wrapper's predictions, then its teacher's plan.

A policy observes each slot's env features, the predictor wrapper's
:data:`~flow_predictor.wrapper.PREDICTION_FEATURES` (:mod:`flow_predictor.wrapper`: it
predicts, it does not plan), and :data:`PLAN_FEATURES`, the per-slot plan of one
scheduler, its *teacher*, named by a spec (``flow_share:quantile=0.9:slack=2:...`` or
``hedge:confidence=0.05:...``; :class:`TeacherPlan`):

* ``pred_nodes_needed``: the share rule's want / cap
  (:func:`~mara_agents.planning.share_rule.want_and_count`: the fewest nodes that finish
  the task ``slack`` ticks early if its remaining work is the ``quantile`` of the
  prediction; the cap when none within it does);
* ``pred_share``: the teacher's count / cap: flow_share's round-robin up to those wants,
  or hedge's knapsack (:func:`~mara_agents.planning.hedge_rule.plan_counts`).

With a ``hedge`` teacher the want is the share rule's with its defaults, and the teacher's
``quantiles`` and ``flow_spread`` also set how the ``flow+deadline`` predictions fuse the
flow model with the deadline prior (the ``task`` wrapper's calibrated model reads
``quantiles`` alone): every hedge knob is read from the one spec.  With
every active task visible (``num_slots >= num_nodes``) the plan is the teacher
scheduler's own.  A policy file records the teacher's spec in one header line
(:mod:`mara_agents.policy.policy_file`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv

from flow_predictor.deadline_prior import DeadlinePrior
from flow_predictor.remaining import FLOW_SAMPLES, RemainingWorkPredictor
from flow_predictor.wrapper import (
    CLUSTER_CHOICE,
    PREDICTION_FEATURES,
    PRIOR_WRAPPERS,
    TASK,
    PlanRows,
    PredictionSettings,
    PredictorFeatures,
    make_predictor,
)
from mara_agents.planning.hedge_rule import HedgeParams, plan_counts
from mara_agents.planning.history import ClusterHistory
from mara_agents.planning.share_rule import FlowShareParams, want_and_count
from mara_agents.planning.specs import parse_value
from mara_env.cluster_env import env as make_aec_env
from mara_env.config import ClusterConfig

PLAN_FEATURES = ("pred_nodes_needed", "pred_share")
# wrapper options the features read, not the predictor: the deadline prior's file and the
# spec of the teacher whose plan they read
FEATURE_OPTIONS = ("deadline_prior", "teacher")
# what a wrapped env adds to each slot row after the env's own features
ADDED_FEATURES = PREDICTION_FEATURES + PLAN_FEATURES
# the schedulers whose plan a policy can read, and their knobs
TEACHERS: dict[str, type] = {"flow_share": FlowShareParams, "hedge": HedgeParams}


@dataclass(frozen=True)
class TeacherPlan:
    """The per-slot plan of a teacher scheduler (:data:`PLAN_FEATURES`): its knobs, and the
    share rule behind ``pred_nodes_needed`` (the teacher's own for ``flow_share``, the
    rule's defaults for ``hedge``)."""

    name: str
    share: FlowShareParams
    hedge: HedgeParams | None = None
    columns: ClassVar[tuple[str, ...]] = PLAN_FEATURES

    @classmethod
    def from_spec(cls, spec: str) -> TeacherPlan:
        """The plan of the scheduler spec ``NAME[:key=value...]`` (the grammar of
        :mod:`mara_agents.planning.specs`), ``NAME`` one of :data:`TEACHERS` and each key a
        field of its ``*Params``, which checks the value."""
        name, *params = spec.split(":")
        if name not in TEACHERS:
            raise ValueError(f"teacher {spec!r}: expected one of {list(TEACHERS)}")
        known = [f.name for f in fields(TEACHERS[name])]
        kwargs: dict[str, Any] = {}
        for p in params:
            key, eq, text = p.partition("=")
            if not eq or key not in known:
                raise ValueError(f"teacher {spec!r}: {p!r}; expected key=value, a key of {known}")
            kwargs[key] = parse_value(text)
        try:
            knobs = TEACHERS[name](**kwargs)
        except ValueError as exc:
            raise ValueError(f"teacher {spec!r}: {exc}") from None
        if name == "hedge":
            return cls(name, FlowShareParams(), knobs)
        return cls(name, knobs)

    @property
    def spec(self) -> str:
        """The spec naming this plan with every knob written out (it reads back equal)."""
        knobs = self.share if self.hedge is None else self.hedge
        values = knobs.to_dict().items()
        written = (f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in values)
        return ":".join([self.name, *written])

    @property
    def prices_by_cluster(self) -> bool:
        """Whether this is a hedge plan whose ``miss_cost`` is the cluster's tuned price
        (resolved per cluster, :meth:`HedgeParams.on_cluster`)."""
        return self.hedge is not None and self.hedge.prices_by_cluster

    @property
    def reads_load(self) -> bool:
        """Whether this is a hedge plan whose ``light`` reads the observed load."""
        return self.hedge is not None and self.hedge.light > 0

    @property
    def levels(self) -> tuple[float, ...]:
        """The quantile levels the share rule reads: its want's and its triage's."""
        return (self.share.quantile, self.share.drop)

    def write(self, rows: PlanRows, out: np.ndarray) -> None:
        """:data:`PLAN_FEATURES` of every task of ``rows`` into ``out`` (tasks x 2)."""
        share = self.share
        with np.errstate(invalid="ignore", divide="ignore"):  # what ticks_needed ignores
            want, count = want_and_count(
                rows.quantiles[:, 0],
                rows.quantiles[:, 1],
                rows.fallback,
                rows.left,
                rows.cap,
                rows.nodes_now,
                rows.rate,
                rows.alpha,
                float(share.slack),
                share.drop > 0,
                rows.starts,
                rows.num_nodes,
            )
        out[:, 0] = want / rows.cap
        if self.hedge is None:
            out[:, 1] = count / rows.cap
            return
        for s in range(len(rows.num_nodes)):  # hedge plans each simulation on its own nodes
            part = slice(rows.starts[s], rows.starts[s + 1])
            samples = rows.samples[part]
            counts, _ = plan_counts(
                samples,
                rows.fallback[part] | np.isnan(samples).any(axis=1),
                rows.left[part],
                rows.cap[part],
                rows.nodes_now[part],
                rows.rate[part],
                rows.alpha[part],
                int(rows.num_nodes[s]),
                self.hedge,
                None if np.isnan(rows.load[s]) else float(rows.load[s]),
            )
            out[part, 1] = counts / rows.cap[part]


SHARE_TEACHER = TeacherPlan("flow_share", FlowShareParams()).spec
HEDGE_TEACHER = TeacherPlan("hedge", FlowShareParams(), HedgeParams()).spec


@dataclass(frozen=True)
class FeatureSettings:
    """How a policy's added features are computed: its ``teacher`` (a spec of
    :data:`TEACHERS`, the one source of the plan's knobs), the flow samples per task
    (``samples``, flow wrapper only) and, for the ``flow+deadline`` and ``task`` wrappers,
    the deadline prior's log ratios (and log windows, where it has them) and whether the
    calibrated remaining-work model reads them (``task_work``: the ``task`` wrapper).  A
    policy file records them (header keys ``teacher``, ``flow_samples``, ``deadline_prior``
    and ``deadline_windows``; ``task_work`` is its ``wrapper``) and acts with them."""

    teacher: str = SHARE_TEACHER
    samples: int = FLOW_SAMPLES
    deadline_prior: tuple[float, ...] = field(default=(), repr=False)
    deadline_windows: tuple[float, ...] = field(default=(), repr=False)
    # what a hedge teacher's miss_cost=cluster is on the cluster these settings are for
    # (:attr:`~mara_agents.planning.history.ClusterHistory.miss_cost`); None for others
    miss_cost: float | None = None
    # the task wrapper: the calibrated remaining-work model reads the prior and the flow
    # samples (:class:`~flow_predictor.wrapper.PredictionSettings`)
    task_work: bool = False
    plan: TeacherPlan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        plan = TeacherPlan.from_spec(self.teacher)
        if self.deadline_prior and plan.hedge is None:
            raise ValueError(
                f"teacher {self.teacher!r} with a deadline prior: expected a hedge teacher "
                "(its quantiles and flow_spread fuse the prior with the flow model)"
            )
        if self.task_work and not self.deadline_prior:
            raise ValueError("task_work without a deadline prior: the model reads one")
        object.__setattr__(self, "teacher", plan.spec)
        tuned = plan.prices_by_cluster
        if tuned != (self.miss_cost is not None):
            raise ValueError(
                f"teacher {plan.spec!r} with miss_cost={self.miss_cost!r}: expected the "
                "cluster's price exactly when the teacher's miss_cost is 'cluster'"
            )
        if tuned:
            plan = dataclasses.replace(plan, hedge=plan.hedge.on_cluster(self.miss_cost))
        object.__setattr__(self, "plan", plan)

    def prediction(self) -> PredictionSettings:
        """The predictor wrapper's settings: the samples, the share rule's refresh and, with
        a deadline prior, the teacher's quantiles and flow spread."""
        plan = self.plan
        if not self.deadline_prior or plan.hedge is None:
            return PredictionSettings(self.samples, plan.share.refresh)
        return PredictionSettings(
            self.samples,
            plan.share.refresh,
            self.deadline_prior,
            self.deadline_windows,
            plan.hedge.quantiles,
            plan.hedge.flow_spread,
            self.task_work,
        )


def feature_settings(
    wrapper: str,
    options: dict[str, Any] | None = None,
    history: ClusterHistory | None = None,
    jobs: str | None = None,
) -> FeatureSettings | None:
    """The settings of ``wrapper``'s features built with ``options`` (None for ``none``):
    ``flow`` and ``wls`` read flow_share's plan; ``flow+deadline``, ``task`` and
    ``cluster`` hedge's (the spec of ``options["teacher"]``, default
    :data:`HEDGE_TEACHER`), with the deadline prior of ``options["deadline_prior"]`` (a
    file), else that of the cluster's ``history`` (None: the default cluster's, the shipped
    files), and a ``miss_cost=cluster`` teacher's price on that history
    (:func:`history_fields`); ``cluster`` reads the distribution that history chose for
    workload ``jobs`` (:func:`history_fields`)."""
    if wrapper == "none":
        return None
    options = options or {}
    samples = int(options.get("n_samples", FLOW_SAMPLES))
    if wrapper not in PRIOR_WRAPPERS:
        return FeatureSettings(SHARE_TEACHER, samples)
    history = history or ClusterHistory.of(ClusterConfig())
    if options.get("deadline_prior") is not None:
        prior = DeadlinePrior.load(options["deadline_prior"])
    else:
        prior = history.prior
    teacher = TeacherPlan.from_spec(options.get("teacher", HEDGE_TEACHER))
    if teacher.hedge is None:
        raise ValueError(f"wrapper {wrapper!r}: teacher {teacher.spec!r}; expected a hedge spec")
    return FeatureSettings(
        teacher.spec,
        samples,
        **prior_fields(prior),
        **history_fields(teacher, history, wrapper, jobs),
    )


def history_fields(
    teacher: TeacherPlan, history: ClusterHistory, wrapper: str, jobs: str | None
) -> dict[str, Any]:
    """What ``history`` says of a ``wrapper`` policy's features on workload ``jobs``
    (``none``: synthetic), for :class:`FeatureSettings`: ``miss_cost``, the price a hedge
    ``teacher``'s ``miss_cost=cluster`` is (none for other teachers), and ``task_work``,
    whether they read the calibrated model (the ``task`` wrapper; ``cluster``: where the
    history chose it for that workload)."""
    fields_: dict[str, Any] = {"task_work": wrapper == TASK}
    if wrapper == CLUSTER_CHOICE:
        fields_["task_work"] = history.distribution(jobs or "none") == TASK
    if teacher.prices_by_cluster:
        fields_["miss_cost"] = history.price()
    return fields_


def prior_fields(prior: DeadlinePrior) -> dict[str, tuple[float, ...]]:
    """``prior`` as :class:`FeatureSettings` holds it: ``deadline_prior`` (its log ratios)
    and ``deadline_windows`` (its log windows; empty without)."""
    windows = () if prior.log_windows is None else tuple(float(v) for v in prior.log_windows)
    return {
        "deadline_prior": tuple(float(v) for v in prior.log_ratios),
        "deadline_windows": windows,
    }


def policy_predictor(
    wrapper: str, options: dict[str, Any] | None = None, samples: int = FLOW_SAMPLES
) -> RemainingWorkPredictor | None:
    """The predictor behind a policy's ``wrapper`` features (None for ``none``):
    :func:`~flow_predictor.wrapper.make_predictor` with the wrapper options that are the
    predictor's own (all but :data:`FEATURE_OPTIONS`)."""
    own = {k: v for k, v in (options or {}).items() if k not in FEATURE_OPTIONS}
    return make_predictor(wrapper, own, samples)


def wrap(
    env: AECEnv,
    wrapper: str,
    options: dict[str, Any] | None = None,
    predictor: RemainingWorkPredictor | None = None,
    settings: FeatureSettings | None = None,
    history: ClusterHistory | None = None,
) -> AECEnv:
    """``env`` with a policy's features per slot: ``flow`` (shipped model), ``flow+deadline``,
    ``task``, ``wls``, or ``none``; ``predictor``: the one :func:`policy_predictor` built
    for them (else built now); ``settings``: those of the features (default:
    :func:`feature_settings` of the options on ``history``, else on that of ``env``'s
    cluster)."""
    config = env.unwrapped.engine.config
    if settings is None and wrapper in PRIOR_WRAPPERS and history is None:
        history = ClusterHistory.of(config)
    settings = settings or feature_settings(wrapper, options, history, config.jobs)
    if predictor is None and settings is not None:
        predictor = policy_predictor(wrapper, options, settings.samples)
    if predictor is None or settings is None:
        return env
    return PredictorFeatures(env, predictor, settings.prediction(), settings.plan)


def make_wrapped_env(
    env_config: dict[str, Any], predictor: RemainingWorkPredictor | None = None
) -> AECEnv:
    """The AEC env for ``{"cluster": {...}, "wrapper": ..., "wrapper_options": {...},
    "history": ClusterHistory}`` (``predictor``: the one :func:`policy_predictor` built for
    its wrapper, else built now; ``history``: the cluster's, built by whoever starts the
    run, else read here)."""
    cluster = ClusterConfig.from_dict(dict(env_config.get("cluster", {})))
    return wrap(
        make_aec_env(config=cluster),
        env_config.get("wrapper", "none"),
        env_config.get("wrapper_options"),
        predictor,
        history=env_config.get("history"),
    )
