"""PettingZoo wrapper that adds remaining-work predictions to every task slot.

Wrapped layout (``P = len(PREDICTION_FEATURES)``, ``Q``: the columns of an optional
:class:`SlotPlan`):

* ``observation``: the 8 node features, then ``K`` rows of ``13 + P + Q``: the env's 13
  slot features followed by :data:`PREDICTION_FEATURES`, then the plan's columns;
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

The ``task`` wrapper's predictions are the calibrated remaining-work model's
(:mod:`flow_predictor.task_work`, the shipped model), which reads the flow model's samples
and the deadline prior with everything else a scheduler knows of a task: the same features
from every task's arrival on, and its calibration updated from the tasks that end.

The wrapper predicts; it does not plan.  A :class:`SlotPlan` (a planner's per-slot
columns: the policy's are :mod:`mara_agents.policy.features`) is handed the same
predictions of the visible slots and writes its columns after them.

Several envs stepped together (an RLlib env runner's) compute their features together with
:func:`features_together`: one predictor call for all of them, the same features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium
import numba
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import BaseWrapper

from flow_predictor.deadline_prior import DeadlineInformed, DeadlinePrior
from flow_predictor.remaining import (
    FLOW_SAMPLES,
    REFRESH,
    PredictionCache,
    RemainingWorkPredictor,
    quantile_neighbours,
    refresh_together,
    shares_within,
    sorted_quantiles,
)
from flow_predictor.wls import WLSPredictor
from mara_env.config import ConfigError
from mara_env.engine import NODE_FEATURES, OBS_LIMIT, SLOT_FEATURES
from mara_env.workload import reference_nodes

PREDICTION_FEATURES = (
    "pred_q10",  # log1p(10% quantile of remaining reference ticks) / LOG_TICKS_SCALE
    "pred_q50",  # same for the median
    "pred_q90",  # same for the 90% quantile ("not reached" -> the env's clip, OBS_LIMIT)
    "p_deadline_now",  # P(remaining work <= rate * nodes_now**alpha * ticks left)
    "p_deadline_cap",  # P(remaining work <= rate * cap**alpha * (ticks left - 1)); -1: warm-up
    "pred_fallback",  # 1 if the prefix was too short for the predictor (or unknown)
)
QUANTILES = (0.1, 0.5, 0.9)
# column of each feature (constants of the compiled code below)
_Q10, _Q50, _Q90, _P_NOW, _P_CAP, _FALLBACK = range(len(PREDICTION_FEATURES))
# log1p of a few to a few hundred reference ticks is 2 to 6: halved, the quantile features
# lie in 1 to 3, the range of the env's own features (durations in units of TICK_SCALE).
LOG_TICKS_SCALE = 2.0


@dataclass(frozen=True)
class PredictionSettings:
    """How the predictions are made: flow samples per task (``samples``, flow model only),
    when a task is predicted again (``refresh``, a fraction of its reports), and, with
    ``deadline_prior`` (a :class:`~flow_predictor.deadline_prior.DeadlinePrior`'s log
    ratios, and its log windows where it has them: the ``flow+deadline`` wrapper), the
    fusion of the flow samples with the prior
    (:class:`~flow_predictor.deadline_prior.DeadlineInformed`): read as ``quantiles``
    evenly spaced quantiles, the flow model's log spread times ``flow_spread``.  The
    fusion's two numbers are a planner's (``HedgeParams``): the caller passes them.  With
    ``task_work`` (the ``task`` wrapper) the prior and the flow samples are inputs of the
    calibrated remaining-work model instead (:class:`~flow_predictor.task_work.TaskWork`,
    ``quantiles`` evenly spaced quantiles; ``flow_spread`` is not read)."""

    samples: int = FLOW_SAMPLES
    refresh: float = REFRESH
    deadline_prior: tuple[float, ...] = ()
    deadline_windows: tuple[float, ...] = ()
    quantiles: int = 0
    flow_spread: float = 0.0
    task_work: bool = False

    def __post_init__(self) -> None:
        if self.task_work and not self.deadline_prior:
            raise ValueError(
                "prediction settings: task_work reads the deadline prior; give deadline_prior"
            )
        if self.deadline_prior and (self.quantiles < 1 or not self.flow_spread > 0):
            raise ValueError(
                f"prediction settings: a deadline prior needs quantiles >= 1 and "
                f"flow_spread > 0; got quantiles={self.quantiles!r}, "
                f"flow_spread={self.flow_spread!r}"
            )


@dataclass(frozen=True)
class PlanRows:
    """What a :class:`SlotPlan` reads of this tick's visible tasks (rows; each
    simulation's ``starts[s]:starts[s + 1]``, in deadline order, as the env's slots): their
    predictions (``samples``, ``fallback``, and ``quantiles`` at the plan's levels, from
    the wrapper's one sort) and what the simulation says of them."""

    samples: np.ndarray  # (tasks, samples) remaining work
    fallback: np.ndarray  # bool
    quantiles: np.ndarray  # (tasks, len(plan.levels))
    left: np.ndarray  # ticks to the deadline
    cap: np.ndarray  # int64
    nodes_now: np.ndarray  # nodes that served each task in the last tick (warm)
    rate: np.ndarray
    alpha: np.ndarray
    starts: np.ndarray  # int64, len = simulations + 1
    num_nodes: np.ndarray  # int64, each simulation's nodes
    # each simulation's observed load under the wrapper's deadline prior
    # (DeadlinePrior.observed_load; nan: no prior, or a plan that does not read it)
    load: np.ndarray


class SlotPlan(Protocol):
    """Columns a planner writes per slot from the wrapper's predictions (hashable: wrappers
    with equal settings and plans compute together)."""

    columns: tuple[str, ...]  # the names of the columns it writes, in order
    levels: tuple[float, ...]  # the quantile levels of the predictions it reads
    reads_load: bool  # whether it reads the cluster's observed load (PlanRows.load)

    def write(self, rows: PlanRows, out: np.ndarray) -> None:
        """Its columns of every task of ``rows`` into ``out`` (float32, tasks x columns)."""


class PredictorFeatures(BaseWrapper):
    """Appends :data:`PREDICTION_FEATURES` (then ``plan``'s columns) to every slot row of
    ``observation`` and ``state``.

    ``predictor``: any :class:`RemainingWorkPredictor` (default: the shipped flow model
    with ``settings.samples`` samples); pass ``WLSPredictor()`` for the no-flow ablation —
    same layout.  ``settings``: :class:`PredictionSettings` (default: the defaults).
    ``plan``: a :class:`SlotPlan` whose columns follow the predictions (None: none).
    """

    def __init__(
        self,
        env: AECEnv,
        predictor: RemainingWorkPredictor | None = None,
        settings: PredictionSettings | None = None,
        plan: SlotPlan | None = None,
    ) -> None:
        super().__init__(env)
        self.settings = settings = settings or PredictionSettings()
        self.plan = plan
        if predictor is None:
            from flow_predictor.checkpoint import load_predictor

            predictor = load_predictor(n_samples=settings.samples)
        self.predictor = predictor
        self._predictions = PredictionCache(predictor, settings.refresh)
        self._source: Any = self._predictions
        self.prior: DeadlinePrior | None = None
        if settings.deadline_prior:
            windows = np.asarray(settings.deadline_windows) if settings.deadline_windows else None
            prior = self.prior = DeadlinePrior(np.asarray(settings.deadline_prior), {}, windows)
            if settings.task_work:
                from flow_predictor.task_work import TaskWork, TaskWorkModel

                model = TaskWorkModel.load()
                self._source = TaskWork(model, prior, self._predictions, settings.quantiles)
            else:
                self._source = DeadlineInformed(
                    prior, self._predictions, settings.quantiles, settings.flow_spread
                )
        self.added = PREDICTION_FEATURES + (() if plan is None else tuple(plan.columns))
        engine = self._engine = env.unwrapped.engine  # persists across resets
        base = engine.observation_space
        self.num_slots = engine.config.num_slots
        self.node_dim = len(NODE_FEATURES)
        self.base_slot_dim = len(SLOT_FEATURES)
        self.slot_dim = self.base_slot_dim + len(self.added)
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
        self._extra = np.zeros((self.num_slots, len(self.added)), np.float32)
        # Where each entry of the env's state and of the predictor features goes in the
        # wrapped state: per slot its env row, then its predictor row (the node and queue
        # features stay in place).
        k, b_dim, p_dim = self.num_slots, self.base_slot_dim, len(self.added)
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
    compiled pass (:func:`_feature_rows`) over the tasks of the wrappers of each setting
    and plan."""
    groups: dict[tuple[PredictionSettings, SlotPlan | None], list[PredictorFeatures]] = {}
    for w in wrappers:
        groups.setdefault((w.settings, w.plan), []).append(w)
    for (_, plan), group in groups.items():
        _fill_group(group, plan)


def _task_columns(sim: Any, tasks: np.ndarray) -> tuple[np.ndarray, ...]:
    """What the features read of ``tasks`` besides their predictions: ticks left to the
    deadline, cap, nodes now (warm), rate, alpha and reference nodes."""
    wl = sim.workload
    return (
        wl.deadline[tasks] - sim.t,
        wl.cap[tasks],
        sim.nodes_now[tasks],
        wl.rate[tasks],
        wl.alpha[tasks],
        reference_nodes(wl, sim.config, tasks),
    )


def _fill_group(wrappers: Sequence[PredictorFeatures], plan: SlotPlan | None) -> None:
    """:func:`_fill_features` of wrappers that share their settings and plan."""
    requests, parts = [], []
    for w in wrappers:
        w._extra.fill(0.0)
        w._key = w._tick()
        _, sim, tasks = w._prediction_request()
        if len(tasks):
            rw = w._source.get(sim, tasks)
            requests.append((w, sim, tasks))
            parts.append((rw.samples, rw.fallback, *_task_columns(sim, tasks)))
    if not requests:
        return
    columns = parts[0] if len(parts) == 1 else [_joined(list(c)) for c in zip(*parts)]
    typed = [np.asarray(x, t) for x, t in zip(columns, _COLUMN_DTYPES)]
    samples = typed[0]
    plan_levels = () if plan is None else tuple(plan.levels)
    # one sort of each task's samples for every level read: the features' and the plan's
    qs = sorted_quantiles(
        samples, *quantile_neighbours((*QUANTILES, *plan_levels), samples.shape[1])
    )
    rows = np.empty((len(samples), len(wrappers[0].added)), np.float32)
    _feature_rows(*typed, qs, rows)
    if plan is not None:
        sizes = [len(tasks) for _, _, tasks in requests]
        plan_rows = PlanRows(
            samples=typed[0],
            fallback=typed[1],
            quantiles=qs[:, len(QUANTILES) :],
            left=typed[2],
            cap=typed[3],
            nodes_now=typed[4],
            rate=typed[5],
            alpha=typed[6],
            starts=np.array([0, *np.cumsum(sizes)], np.int64),
            num_nodes=np.array([sim.config.num_nodes for _, sim, _ in requests], np.int64),
            load=np.array([_observed_load(w, sim, plan) for w, sim, _ in requests]),
        )
        plan.write(plan_rows, rows[:, len(PREDICTION_FEATURES) :])
    start = 0
    for w, _, tasks in requests:
        w._extra[: len(tasks)] = rows[start : start + len(tasks)]
        start += len(tasks)


def _observed_load(wrapper: PredictorFeatures, sim: Any, plan: SlotPlan) -> float:
    """The cluster's observed load under the wrapper's deadline prior where ``plan`` reads
    it, else nan."""
    if wrapper.prior is None or not plan.reads_load:
        return np.nan
    return wrapper.prior.observed_load(sim)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` end to end (the one part itself: no copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


# the dtypes of _feature_rows' columns: samples, fallback, ticks left, cap, nodes now,
# rate, alpha, reference nodes
_COLUMN_DTYPES = (
    np.float64,
    np.bool_,
    np.float64,
    np.int64,
    np.float64,
    np.float64,
    np.float64,
    np.float64,
)


@numba.njit(cache=True, error_model="numpy")
def work_in_ticks(work: Any, ref: Any) -> Any:
    """Remaining ``work`` as the features read it: ``log1p(work / ref) / LOG_TICKS_SCALE``,
    ``ref`` the task's work per tick at its reference allocation (``rate * n_ref**alpha``);
    scalars or arrays ("never", inf, stays inf: the caller clips it to its limit)."""
    return np.log1p(work / ref) / LOG_TICKS_SCALE


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
    qs: np.ndarray,
    out: np.ndarray,
) -> None:
    """:data:`PREDICTION_FEATURES` of tasks (rows) from their remaining-work samples and
    their :data:`QUANTILES` (the first columns of ``qs``), into the first columns of ``out``
    (float32).

    The quantiles; the deadline probabilities at the nodes now and at the cap.  Unknown
    (nan) predictions read as 0 with the fallback flag set; "never" as the limit: the
    env's own, so every feature of the observation shares its bounds.
    """
    budgets = np.empty((len(rate), 2))
    for i in range(len(rate)):
        budgets[i, 0] = rate[i] * nodes_now[i] ** alpha[i] * left[i]
        budgets[i, 1] = rate[i] * cap[i] ** alpha[i] * max(left[i] - 1, 0.0)
    probs = shares_within(samples, budgets)
    for i in range(len(cap)):
        ref = rate[i] * n_ref[i] ** alpha[i]
        row = out[i]
        row[_Q10] = work_in_ticks(qs[i, 0], ref)
        row[_Q50] = work_in_ticks(qs[i, 1], ref)
        row[_Q90] = work_in_ticks(qs[i, 2], ref)
        row[_P_NOW] = probs[i, 0]
        row[_P_CAP] = probs[i, 1]
        row[_FALLBACK] = fallback[i]
        for c in range(_FALLBACK + 1):
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


# The predictions an env (and a policy trained on it) may observe: none, the shipped flow
# model, the flow model fused with the deadline prior, the calibrated remaining-work model
# on both, the one of those two the cluster's history chose for the env's workload
# (``cluster``: its settings' ``task_work`` says which, set by whoever builds them), or
# LARA's WLS fit (the no-flow ablation); the same layout but for none.
FLOW_DEADLINE = "flow+deadline"
TASK = "task"
CLUSTER_CHOICE = "cluster"
WRAPPERS = ("none", "flow", FLOW_DEADLINE, TASK, CLUSTER_CHOICE, "wls")
# the wrappers whose predictions read the flow model; those that read the cluster's
# deadline prior too (their plan is a hedge teacher's, and each is named as the hedge
# predictor that plans on the same predictions); and those that may read the calibrated
# remaining-work model
FLOW_WRAPPERS = ("flow", FLOW_DEADLINE, TASK, CLUSTER_CHOICE)
PRIOR_WRAPPERS = (FLOW_DEADLINE, TASK, CLUSTER_CHOICE)
TASK_WRAPPERS = (TASK, CLUSTER_CHOICE)


def make_predictor(
    wrapper: str, options: dict[str, Any] | None = None, samples: int = FLOW_SAMPLES
) -> RemainingWorkPredictor | None:
    """The predictor behind ``wrapper``'s features (None for ``none``): build it once and
    pass it to every :class:`PredictorFeatures` that needs it (a flow model loads a checkpoint).
    ``options``: the predictor's own keyword arguments; a flow model draws ``samples`` per
    task unless they name ``n_samples``."""
    if wrapper not in WRAPPERS:
        raise ConfigError(f"wrapper={wrapper!r}: expected one of {list(WRAPPERS)}")
    if wrapper == "none":
        return None
    if wrapper in FLOW_WRAPPERS:
        # Imported here: the flow model (torch) is only needed when asked for.
        from flow_predictor.checkpoint import load_predictor

        return load_predictor(**{"n_samples": samples, **(options or {})})
    return WLSPredictor(**(options or {}))


def features_together(envs: Sequence[AECEnv]) -> None:
    """This tick's predictor features of every predictor-wrapped env of ``envs`` (their next
    observations then compute nothing), computed together: one predictor call for the new
    or grown tasks of those that share a predictor, one pass over all their slots.  Each
    gets the features it would have computed alone."""
    wrappers = [e for e in envs if isinstance(e, PredictorFeatures)]
    refresh_together([w._prediction_request() for w in wrappers])
    _fill_features(wrappers)
