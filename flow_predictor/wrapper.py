"""PettingZoo wrapper that adds remaining-work predictions to every task slot.

Wrapped layout (``P = len(PREDICTOR_FEATURES)``):

* ``observation``: the 8 node features, then ``K`` rows of ``13 + P``: the env's 13 slot
  features followed by :data:`PREDICTOR_FEATURES`;
* ``state``: that observation followed by the env's 4 queue features;
* ``action_mask``: unchanged.

Remaining work is measured in the task's *reference ticks* (work per tick on its
reference allocation, ``n_ref`` nodes of ``mara_env.workload.reference_nodes``:
``rate * n_ref**alpha``).  A task's prediction is computed once per new loss report
(one batched predictor call per tick for every visible task that reported since) and
cached; the deadline probabilities are recomputed every tick from the cached samples.
Tasks with fewer than three reports get the predictor's documented fallback and
``pred_fallback = 1``; tasks with no usable report (unknown remaining work) get 0 in
every predictor feature and ``pred_fallback = 1``.

``pred_nodes_needed`` and ``pred_share`` are the flow_share rule's want and count
(:mod:`flow_predictor.share_rule`), computed over the visible slots with the wrapper's own
:class:`FeatureSettings` (the rule's parameters and the flow sample count, which a policy
file records).  With the rule's default parameters they equal the ``flow_share``
scheduler's exactly when no task that would get a node is hidden, which
``num_slots >= num_nodes`` guarantees.

Several envs stepped together (an RLlib env runner's) compute their features together with
:func:`features_together`: one predictor call for all of them, the same features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numba
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import BaseWrapper

from flow_predictor.deadline_prior import DeadlineInformed, DeadlinePrior
from flow_predictor.hedge_rule import HedgeParams, plan_counts
from flow_predictor.remaining import (
    FLOW_SAMPLES,
    PredictionCache,
    RemainingWorkPredictor,
    quantile_neighbours,
    refresh_together,
    shares_within,
    sorted_quantiles,
)
from flow_predictor.share_rule import (
    RULE_COLUMN_DTYPES,
    FlowShareParams,
    joined,
    rule_columns,
    segments,
    want_and_count,
)
from flow_predictor.wls import WLSPredictor
from mara_env.cluster_env import NODE_FEATURES, OBS_LIMIT, SLOT_FEATURES
from mara_env.cluster_env import env as make_aec_env
from mara_env.config import ClusterConfig, ConfigError
from mara_env.workload import reference_nodes

PREDICTOR_FEATURES = (
    "pred_q10",  # log1p(10% quantile of remaining reference ticks) / LOG_TICKS_SCALE
    "pred_q50",  # same for the median
    "pred_q90",  # same for the 90% quantile ("not reached" -> the env's clip, OBS_LIMIT)
    "p_deadline_now",  # P(remaining work <= rate * nodes_now**alpha * ticks left)
    "p_deadline_cap",  # P(remaining work <= rate * cap**alpha * (ticks left - 1)); -1: warm-up
    "pred_fallback",  # 1 if the prefix was too short for the predictor (or unknown)
    "pred_nodes_needed",  # confident_nodes / cap: the share a task confidently needs
    "pred_share",  # fair_share of the visible slots up to those needs / cap (flow_share's count)
)
QUANTILES = (0.1, 0.5, 0.9)
# column of each feature (constants of the compiled code below)
_Q10, _Q50, _Q90, _P_NOW, _P_CAP, _FALLBACK, _NEEDED, _SHARE = (
    PREDICTOR_FEATURES.index(name)
    for name in (
        "pred_q10",
        "pred_q50",
        "pred_q90",
        "p_deadline_now",
        "p_deadline_cap",
        "pred_fallback",
        "pred_nodes_needed",
        "pred_share",
    )
)
# log1p of a few to a few hundred reference ticks is 2 to 6: halved, the quantile features
# lie in 1 to 3, the range of the env's own features (durations in units of TICK_SCALE).
LOG_TICKS_SCALE = 2.0


@dataclass(frozen=True)
class FeatureSettings:
    """How the features are computed: the share rule's parameters behind
    ``pred_nodes_needed`` / ``pred_share`` and when a task is predicted again (``rule``),
    and the flow samples per task (``samples``, flow wrapper only).  With
    ``deadline_prior`` (a :class:`~flow_predictor.deadline_prior.DeadlinePrior`'s log
    ratios: the ``flow+deadline`` wrapper) every feature reads the flow samples fused with
    the prior (as ``planner.quantiles`` evenly spaced quantiles, as the planner reads
    them), and ``pred_share`` is the hedge planner's count
    (:func:`~flow_predictor.hedge_rule.plan_counts` with ``planner``) instead of the share
    rule's.  A policy file records them (header keys ``flow_share``, ``flow_samples``,
    ``hedge`` and ``deadline_prior``) and acts with them."""

    rule: FlowShareParams = field(default_factory=FlowShareParams)
    samples: int = FLOW_SAMPLES
    planner: HedgeParams | None = None
    deadline_prior: tuple[float, ...] = ()

    def levels(self) -> tuple[float, ...]:
        """The quantile levels read from one sort: the features', the rule's want, its
        triage."""
        return (*QUANTILES, self.rule.quantile, self.rule.drop)


class PredictorFeatures(BaseWrapper):
    """Appends :data:`PREDICTOR_FEATURES` to every slot row of ``observation`` and ``state``.

    ``predictor``: any :class:`RemainingWorkPredictor` (default: the shipped flow model
    with ``settings.samples`` samples); pass ``WLSPredictor()`` for the no-flow ablation —
    same layout.  ``settings``: :class:`FeatureSettings` (default: the defaults).
    """

    def __init__(
        self,
        env: AECEnv,
        predictor: RemainingWorkPredictor | None = None,
        settings: FeatureSettings | None = None,
    ) -> None:
        super().__init__(env)
        self.settings = settings = settings or FeatureSettings()
        if predictor is None:
            from flow_predictor.checkpoint import load_predictor

            predictor = load_predictor(n_samples=settings.samples)
        self.predictor = predictor
        self._predictions = PredictionCache(predictor, settings.rule.refresh)
        self._source: PredictionCache | DeadlineInformed = self._predictions
        if settings.deadline_prior:
            prior = DeadlinePrior(np.asarray(settings.deadline_prior), {})
            planner = settings.planner or HedgeParams()
            self._source = DeadlineInformed(
                prior, self._predictions, planner.quantiles, planner.flow_spread
            )
        engine = self._engine = env.unwrapped.engine  # persists across resets
        base = engine.observation_space
        self.num_slots = engine.config.num_slots
        self.node_dim = len(NODE_FEATURES)
        self.base_slot_dim = len(SLOT_FEATURES)
        self.slot_dim = self.base_slot_dim + len(PREDICTOR_FEATURES)
        self.queue_dim = len(base["state"].low) - len(base["observation"].low)
        obs_dim = self.node_dim + self.num_slots * self.slot_dim
        lim = float(base["observation"].high[0])
        space = spaces.Dict(
            {
                "observation": spaces.Box(-lim, lim, (obs_dim,), np.float32),
                "action_mask": base["action_mask"],
                "state": spaces.Box(-lim, lim, (obs_dim + self.queue_dim,), np.float32),
            }
        )
        self.observation_spaces = {a: space for a in env.possible_agents}
        self.state_space = space["state"]
        self._key: tuple[int, int] | None = None
        self._extra = np.zeros((self.num_slots, len(PREDICTOR_FEATURES)), np.float32)
        # Where each entry of the env's state and of the predictor features goes in the
        # wrapped state: per slot its env row, then its predictor row (the node and queue
        # features stay in place).
        k, b_dim, p_dim = self.num_slots, self.base_slot_dim, len(PREDICTOR_FEATURES)
        slot_at = self.node_dim + self.slot_dim * np.arange(k)[:, None]
        self._env_at = np.concatenate(
            [
                np.arange(self.node_dim),
                (slot_at + np.arange(b_dim)).ravel(),
                obs_dim + np.arange(self.queue_dim),
            ]
        )
        self._pred_at = (slot_at + b_dim + np.arange(p_dim)).ravel()
        self._obs_dim = obs_dim
        self._state_dim = obs_dim + self.queue_dim
        # node index of each agent on mara_env's own AEC env: once reset, observations are
        # read from its engine directly (what its observe() returns), past the wrapper chain
        self._raw = env.unwrapped
        self._index = getattr(self._raw, "_index", None)
        self._ready = False

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._source.clear()
        self._key = None
        super().reset(seed=seed, options=options)
        self._ready = self._index is not None

    def observe(self, agent: str) -> dict[str, np.ndarray] | None:
        if self._ready:
            engine = self._engine
            return self._extend(engine.state(self._index[agent]), engine.mask())
        obs = super().observe(agent)
        return None if obs is None else self._extend(obs["state"], obs["action_mask"])

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        # Same as AECEnv.last, reading the raw env directly: the attribute chain through
        # three wrappers' __getattr__ otherwise costs more than the predictor itself.
        raw = self._raw
        agent = raw.agent_selection
        return (
            self.observe(agent) if observe else None,
            raw._cumulative_rewards[agent],
            raw.terminations[agent],
            raw.truncations[agent],
            raw.infos[agent],
        )

    def state(self) -> np.ndarray:
        obs = self.env.unwrapped.observe(self.env.unwrapped.agent_selection)
        return self._extend(obs["state"], obs["action_mask"])["state"]

    # ---- features --------------------------------------------------------------
    def _extend(self, env_state: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        if self._key != self._tick():
            _fill_features([self])
        state = np.empty(self._state_dim, np.float32)
        _place(env_state, self._env_at, self._extra, self._pred_at, state)
        return {"observation": state[: self._obs_dim].copy(), "action_mask": mask, "state": state}

    def _prediction_request(self) -> tuple[PredictionCache, Any, np.ndarray]:
        """The cache, simulation and visible tasks of this tick's predictions."""
        engine = self._engine
        return self._predictions, engine.sim, engine.slot_tasks[engine.slot_tasks >= 0]

    def _tick(self) -> tuple[int, int]:
        """The episode and tick the features are of."""
        sim = self._engine.sim
        return id(sim.workload), sim.t


def _fill_features(wrappers: Sequence[PredictorFeatures]) -> None:
    """This tick's predictor features of every wrapper's slots, computed together: one
    compiled pass (:func:`_feature_rows`) over the tasks of the wrappers of each setting."""
    by_settings: dict[FeatureSettings, list[PredictorFeatures]] = {}
    for w in wrappers:
        by_settings.setdefault(w.settings, []).append(w)
    for settings, group in by_settings.items():
        _fill_group(group, settings)


def _fill_group(wrappers: Sequence[PredictorFeatures], settings: FeatureSettings) -> None:
    """:func:`_fill_features` of wrappers that share their settings."""
    requests, parts = [], []
    for w in wrappers:
        w._extra.fill(0.0)
        w._key = w._tick()
        _, sim, tasks = w._prediction_request()
        if len(tasks):
            rw, wl = w._source.get(sim, tasks), sim.workload
            requests.append((w, sim, tasks))
            parts.append(
                (
                    rw.samples,
                    rw.fallback,
                    *rule_columns([(sim, tasks)]),
                    reference_nodes(wl, w._engine.config, tasks),
                )
            )
    if not requests:
        return
    columns = parts[0] if len(parts) == 1 else [joined(list(c)) for c in zip(*parts)]
    typed = [np.asarray(x, t) for x, t in zip(columns, _COLUMN_DTYPES)]
    rows = np.empty((len(typed[0]), len(PREDICTOR_FEATURES)), np.float32)
    levels = quantile_neighbours(settings.levels(), typed[0].shape[1])
    starts, nodes = segments([(sim, tasks) for _, sim, tasks in requests])
    rule = settings.rule
    _feature_rows(*typed, *levels, starts, nodes, float(rule.slack), rule.drop > 0, rows)
    if settings.planner is not None:  # pred_share: the hedge planner's count, per simulation
        samples, fallback, left, cap, warm, rate, alpha = typed[:7]
        for s, (_, sim, _) in enumerate(requests):
            part = slice(starts[s], starts[s + 1])
            counts, _ = plan_counts(
                samples[part],
                fallback[part] | np.isnan(samples[part]).any(axis=1),
                left[part],
                cap[part],
                warm[part],
                rate[part],
                alpha[part],
                sim.config.num_nodes,
                settings.planner,
            )
            rows[part, _SHARE] = counts / cap[part]
    start = 0
    for w, _, tasks in requests:
        w._extra[: len(tasks)] = rows[start : start + len(tasks)]
        start += len(tasks)


# the columns of FeatureSettings.levels() holding the rule's want and triage quantiles
_UPPER, _LOW = len(QUANTILES), len(QUANTILES) + 1
# the dtypes of _feature_rows' columns: samples, fallback, flow_share's rule_columns (ticks
# left, cap, nodes now, rate, alpha), reference nodes
_COLUMN_DTYPES = (np.float64, np.bool_, *RULE_COLUMN_DTYPES, np.float64)


@numba.njit(cache=True, error_model="numpy")
def _feature_rows(
    samples: np.ndarray,
    fallback: np.ndarray,
    left: np.ndarray,
    cap: np.ndarray,
    nodes_now: np.ndarray,
    rate: np.ndarray,
    alpha: np.ndarray,
    n_ref: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    frac: np.ndarray,
    starts: np.ndarray,
    num_nodes: np.ndarray,
    slack: float,
    triage: bool,
    out: np.ndarray,
) -> None:
    """The predictor features of tasks (rows; each simulation's ``starts[s]:starts[s+1]``,
    in deadline order, as flow_share's round-robin) from their remaining-work samples,
    into ``out`` (float32).

    The quantiles (sorted-sample neighbours ``lo``, ``hi`` and ``frac`` of
    :meth:`FeatureSettings.levels`: the features' and the rule's, from one sort); the
    deadline probabilities at the nodes now and at the cap; the share rule's want and
    count (:func:`~flow_predictor.share_rule.want_and_count`, with ``slack`` and
    ``triage``).  Unknown (nan) predictions read as 0 with the fallback flag set;
    "never" as the limit: the env's own, so every feature of the observation shares its
    bounds.
    """
    qs = sorted_quantiles(samples, lo, hi, frac)
    budgets = np.empty((len(rate), 2))
    for i in range(len(rate)):
        budgets[i, 0] = rate[i] * nodes_now[i] ** alpha[i] * left[i]
        budgets[i, 1] = rate[i] * cap[i] ** alpha[i] * max(left[i] - 1, 0.0)
    probs = shares_within(samples, budgets)
    need, share = want_and_count(
        qs[:, _UPPER],
        qs[:, _LOW],
        fallback,
        left,
        cap,
        nodes_now,
        rate,
        alpha,
        slack,
        triage,
        starts,
        num_nodes,
    )
    for i in range(len(cap)):
        ref = rate[i] * n_ref[i] ** alpha[i]
        row = out[i]
        row[_Q10] = np.log1p(qs[i, 0] / ref) / LOG_TICKS_SCALE
        row[_Q50] = np.log1p(qs[i, 1] / ref) / LOG_TICKS_SCALE
        row[_Q90] = np.log1p(qs[i, 2] / ref) / LOG_TICKS_SCALE
        row[_P_NOW] = probs[i, 0]
        row[_P_CAP] = probs[i, 1]
        row[_FALLBACK] = fallback[i]
        row[_NEEDED] = need[i] / cap[i]
        row[_SHARE] = share[i] / cap[i]
        for c in range(len(row)):
            v = row[c]
            row[c] = 0.0 if v != v else min(max(v, -OBS_LIMIT), OBS_LIMIT)


@numba.njit(cache=True)
def _place(
    env_state: np.ndarray,
    env_at: np.ndarray,
    extra: np.ndarray,
    extra_at: np.ndarray,
    out: np.ndarray,
) -> None:
    """The wrapped state: the env's state and the predictor features at their places."""
    for i in range(len(env_at)):
        out[env_at[i]] = env_state[i]
    flat = extra.ravel()
    for i in range(len(extra_at)):
        out[extra_at[i]] = flat[i]


# Predictor features an env (and a policy trained on it) may observe: none, the shipped
# flow model, the flow model fused with the deadline prior (pred_share: the hedge planner's
# count), or LARA's WLS fit (the no-flow ablation); the same layout but for none.
FLOW_DEADLINE = "flow+deadline"
WRAPPERS = ("none", "flow", FLOW_DEADLINE, "wls")


def feature_settings(wrapper: str, options: dict[str, Any] | None = None) -> FeatureSettings | None:
    """The settings of ``wrapper``'s features built with ``options`` (None for ``none``;
    ``flow+deadline``: the deadline prior of ``options["deadline_prior"]``, a file, default
    the shipped one, and the hedge planner's default knobs)."""
    if wrapper == "none":
        return None
    options = options or {}
    samples = int(options.get("n_samples", FLOW_SAMPLES))
    if wrapper != FLOW_DEADLINE:
        return FeatureSettings(samples=samples)
    prior = DeadlinePrior.load(options.get("deadline_prior"))
    return FeatureSettings(
        samples=samples,
        planner=HedgeParams(),
        deadline_prior=tuple(float(v) for v in prior.log_ratios),
    )


def make_predictor(
    wrapper: str, options: dict[str, Any] | None = None, samples: int = FLOW_SAMPLES
) -> RemainingWorkPredictor | None:
    """The predictor behind ``wrapper``'s features (None for ``none``): build it once and
    pass it to :func:`wrap` for every env that needs it (a flow model loads a checkpoint);
    a flow model draws ``samples`` per task unless ``options`` name ``n_samples``."""
    if wrapper not in WRAPPERS:
        raise ConfigError(f"wrapper={wrapper!r}: expected one of {list(WRAPPERS)}")
    if wrapper == "none":
        return None
    if wrapper in ("flow", FLOW_DEADLINE):
        # Imported here: the flow model (torch) is only needed when asked for.
        from flow_predictor.checkpoint import load_predictor

        flow_options = {k: v for k, v in (options or {}).items() if k != "deadline_prior"}
        return load_predictor(**{"n_samples": samples, **flow_options})
    return WLSPredictor(**(options or {}))


def wrap(
    env: AECEnv,
    wrapper: str,
    options: dict[str, Any] | None = None,
    predictor: RemainingWorkPredictor | None = None,
    settings: FeatureSettings | None = None,
) -> AECEnv:
    """``env`` with predictor features per slot: ``flow`` (shipped model), ``wls``, or
    ``none``; ``predictor``: the one :func:`make_predictor` built for them (else built now);
    ``settings``: those of the features (default: :func:`feature_settings` of the options)."""
    settings = settings or feature_settings(wrapper, options)
    if predictor is None and settings is not None:
        predictor = make_predictor(wrapper, options, settings.samples)
    return env if predictor is None else PredictorFeatures(env, predictor, settings)


def make_wrapped_env(
    env_config: dict[str, Any], predictor: RemainingWorkPredictor | None = None
) -> AECEnv:
    """The AEC env for ``{"cluster": {...}, "wrapper": ..., "wrapper_options": {...}}``
    (``predictor``: the one :func:`make_predictor` built for its wrapper, else built now)."""
    cluster = ClusterConfig.from_dict(dict(env_config.get("cluster", {})))
    return wrap(
        make_aec_env(config=cluster),
        env_config.get("wrapper", "none"),
        env_config.get("wrapper_options"),
        predictor,
    )


def features_together(envs: Sequence[AECEnv]) -> None:
    """This tick's predictor features of every predictor-wrapped env of ``envs`` (their next
    observations then compute nothing), computed together: one predictor call for the new
    or grown tasks of those that share a predictor, one pass over all their slots.  Each
    gets the features it would have computed alone."""
    wrappers = [e for e in envs if isinstance(e, PredictorFeatures)]
    refresh_together([w._prediction_request() for w in wrappers])
    _fill_features(wrappers)
