"""A clairvoyant upper bound on the tasks any scheduler can complete in one episode.

The bound is the optimum of a mixed-integer programme that knows every arrival and every
task's exact work ``W_k`` (``work_true``) and keeps only constraints that every schedule of
:class:`~mara_env.cluster.ClusterSim` obeys, so no scheduler, clairvoyant or not, completes
more tasks.  Task ``k`` (cap ``m``, rate ``r``, speed-up ``f(n) = n**alpha``) can be served
in the ticks ``t`` in ``[a_k, d_k)``: the simulator counts a tick's progress at its end,
``t + 1``, and completes a task only if ``t + 1 <= d_k``.  Variables and constraints:

* ``z_k`` binary: task ``k`` completes;  maximise ``sum_k z_k``;
* ``delta_{k,t,j}`` in ``[0, 1]``, ``j < m``: the ``(j+1)``-th warm node of tick ``t > a_k``
  (one that served ``k`` in tick ``t - 1`` too), worth ``r (f(j+1) - f(j))``; as ``f`` is
  concave these worths fall with ``j``, so the work of ``s`` warm nodes is at most the
  piecewise-linear interpolation of ``r f`` at integers, and equal to ``r f(s)`` at an
  integer ``s``;  ``s_{k,t} = sum_j delta_{k,t,j}``;
* ``j_{k,t}`` >= 0: nodes that join in tick ``t`` and give nothing in it (warm-up); the
  task holds ``x_{k,t} = s_{k,t} + j_{k,t}`` nodes, ``s_{k,a_k} = 0``;
* warm nodes served in the previous tick: ``s_{k,t} <= x_{k,t-1}``;
* caps and the cluster: ``x_{k,t} <= m z_k`` (a task that does not complete may as well get
  nothing), ``sum_k x_{k,t} <= N``; and ``delta_{k,t,0} <= z_k``, implied for integer
  ``z`` but not for a fractional one, which could otherwise buy the most valuable first
  node of every tick (it tightens the LP relaxation the solver starts from);
* work: ``sum_{t,j} r (f(j+1) - f(j)) delta_{k,t,j} >= W_k z_k``; a task with ``W_k = 0``
  still needs a tick of progress to report its loss: ``sum_t s_{k,t} >= z_k``.

With ``reassign_cost`` off every node is warm: no ``j``, and ``x = s`` from ``t = a_k``.

Why it is a bound: a schedule of the simulator gives a feasible point with ``z`` its
completions (node counts within caps and ``N``; warm nodes at most both ticks' counts; the
work of a tick exactly ``r f(warm)``; a completed task had reached ``W_k`` by its deadline);
zeroing the nodes of the tasks it does not complete keeps it feasible.  So the optimum,
and any proven dual bound of an unfinished solve, is at least the completions of every
schedule.  The node counts are continuous: a further relaxation (a node may be shared
between tasks without paying warm-ups), so still a bound, and far faster to solve;
``integral_nodes`` makes them integer (exactly the clairvoyant optimum, but slow).
Integrality of ``z`` is what makes the bound tight.  Tasks that cannot reach ``W_k`` even
alone at their cap are dropped first.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from mara_agents.evaluation.stats import METRICS
from mara_env.atomic import atomic_path
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.traces import TraceSet
from mara_env.workload import Workload

DEFAULT_TIME_LIMIT = 2.0
# The harness's bound rows must not depend on the machine's speed: there the branching is
# cut off by a count of branch-and-bound nodes, which HiGHS treats deterministically, and
# the time limit is only a safety net that a normal episode never reaches.  With 0 nodes the
# bound is the relaxation's rounded optimum, tightened by what the root node proves: on 6
# val episodes at load 2 it equalled the bound of 10-, 30- and 200-node branching in every
# one (1.1 s per episode against 3.8 s; the larger limits only prove it optimal).
HARNESS_NODE_LIMIT = 0
HARNESS_TIME_LIMIT = 120.0
# Bumped whenever the programme changes, so that cached bounds of an older one are not reused.
FORMULATION = 1
# HiGHS's bound is a float computed to its tolerances (1e-7 per row): rounding it down to
# a count of tasks, an integer this close above it counts as reached (too much slack only
# loosens the bound, too little could cut below the optimum).
_ROUND_TOL = 1e-4
# Work targets are shrunk by this factor: the simulator sums float gains, whose rounding
# can land a few ulps either side of W_k (too much slack only loosens the bound).
_WORK_SLACK = 1e-9
# Relative shortfall of a task's work that a solution of the relaxation may have and still
# count as completing it (above HiGHS's feasibility tolerance, 1e-7).
_FEAS_TOL = 1e-6


@dataclass(frozen=True)
class BoundResult:
    """The clairvoyant bound of one episode and how it was obtained."""

    completed_bound: float  # no scheduler completes more of the episode's tasks
    tasks: int
    completion_rate: float  # completed_bound / tasks (NaN for an episode without tasks)
    status: str  # "optimal": solved; "limit": a limit stopped the proof (the bound holds)
    gap: float  # (completed_bound - best_found) / completed_bound; 0 when optimal
    seconds: float
    best_found: int  # completions of the best solution found (of the relaxation: x may be
    # fractional, so this is not a schedule the simulator could run)
    completes: np.ndarray  # bool per task: the tasks that solution completes
    candidates: np.ndarray  # bool per task: could reach its work alone at its cap


@dataclass
class _Model:
    """The programme's arrays, plus where each task's node counts sit."""

    tasks: np.ndarray  # the task ids it covers; z of tasks[i] is column i
    node_cols: list[np.ndarray]  # per task: the columns that sum to its nodes x in a tick
    node_tick: list[np.ndarray]  # per task: the index in its window of each of those
    c: np.ndarray
    A: sp.csr_matrix
    lo: np.ndarray
    hi: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray


def whole_tick(config: ClusterConfig) -> bool:
    """Whether the programme charges a joining node its whole first tick: only when the
    simulator does (``reassign_cost`` true or 1); a smaller share is relaxed to none, so
    that the figure stays an upper bound."""
    return float(config.reassign_cost) == 1.0


def candidates(wl: Workload, reassign_cost: bool = True) -> np.ndarray:
    """Tasks that could reach their true work alone: every tick at the cap, warm after the
    first (tasks outside this set complete under no schedule)."""
    ticks = wl.deadline - wl.arrival - (1 if reassign_cost else 0)
    best = wl.rate * wl.cap.astype(np.float64) ** wl.alpha * np.maximum(ticks, 0)
    return np.isfinite(wl.work_true) & (ticks >= 1) & (best >= _target(wl.work_true))


def _target(work: np.ndarray) -> np.ndarray:
    """The work the programme asks of a task (``work_true`` a hair lower, see _WORK_SLACK)."""
    return work * (1 - _WORK_SLACK)


class _Rows:
    """A sparse constraint matrix built a block of rows at a time."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.n = 0

    def add(
        self, r: np.ndarray, c: np.ndarray, v: np.ndarray, lo: float, hi: float | np.ndarray
    ) -> None:
        """Rows ``0..max(r)`` of a new block (``hi`` one value or one per row)."""
        n = int(r.max()) + 1
        self.rows.append(r + self.n)
        self.cols.append(c)
        self.vals.append(np.asarray(v, np.float64))
        self.lo.append(np.full(n, lo))
        self.hi.append(np.broadcast_to(np.asarray(hi, np.float64), (n,)))
        self.n += n

    def matrix(self, n_cols: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """The matrix and its row bounds."""
        if not self.rows:
            return sp.csr_matrix((0, n_cols)), np.zeros(0), np.zeros(0)
        data = (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols)))
        return (
            sp.csr_matrix(data, shape=(self.n, n_cols)),
            np.concatenate(self.lo),
            np.concatenate(self.hi),
        )


def _build(
    wl: Workload,
    tasks: np.ndarray,
    capacity: np.ndarray,
    reassign_cost: bool,
    integral_nodes: bool,
) -> _Model:
    """The programme of the module docstring over ``tasks``, with ``capacity[t]`` nodes
    free in tick ``t``."""
    lead = 1 if reassign_cost else 0  # ticks at the start of a window without warm nodes
    n_z = len(tasks)
    rows = _Rows()
    ub: list[np.ndarray] = [np.ones(n_z)]
    node_cols, node_tick, cap_cols, cap_ticks = [], [], [], []
    n_cols = n_z
    for i, k in enumerate(tasks):
        span, m = int(wl.deadline[k] - wl.arrival[k]), int(wl.cap[k])
        n_w = span - lead
        join = n_cols + np.arange(span * lead)
        delta = n_cols + len(join) + np.arange(n_w * m).reshape(n_w, m)
        n_cols += len(join) + delta.size
        ub += [np.full(len(join), float(m)), np.ones(delta.size)]
        # x over the window: the joins of each tick plus its warm units
        cols = np.r_[join, delta.ravel()]
        tick = np.r_[np.arange(len(join)), np.repeat(np.arange(lead, span), m)]
        node_cols.append(cols)
        node_tick.append(tick)
        cap_cols.append(cols)
        cap_ticks.append(wl.arrival[k] + tick)
        # x_t - m z <= 0
        rows.add(
            np.r_[tick, np.arange(span)],
            np.r_[cols, np.full(span, i)],
            np.r_[np.ones(len(cols)), np.full(span, -float(m))],
            -np.inf,
            0.0,
        )
        # delta_{t,0} - z <= 0: the most valuable warm unit, disaggregated from the cap row
        # (valid as x = 0 when z = 0; it stops a fractional z buying a whole first node)
        one = np.arange(n_w)
        rows.add(
            np.r_[one, one],
            np.r_[delta[:, 0], np.full(n_w, i)],
            np.r_[np.ones(n_w), -np.ones(n_w)],
            -np.inf,
            0.0,
        )
        if lead and n_w:
            # s_t - x_{t-1} <= 0: row t-1 for the warm units of tick t
            prev = tick < span - 1
            rows.add(
                np.r_[np.repeat(np.arange(n_w), m), tick[prev]],
                np.r_[delta.ravel(), cols[prev]],
                np.r_[np.ones(delta.size), -np.ones(int(prev.sum()))],
                -np.inf,
                0.0,
            )
        need = float(_target(wl.work_true[k : k + 1])[0])
        if need > 0:
            # work reached, scaled by the target so rows of all tasks have like magnitudes
            gain = wl.rate[k] * np.diff(np.arange(m + 1, dtype=np.float64) ** wl.alpha[k])
            coef = np.tile(gain / need, n_w)
        else:
            coef = np.ones(delta.size)  # one tick of progress, to report a loss
        rows.add(
            np.zeros(delta.size + 1, np.int64),
            np.r_[delta.ravel(), i],
            np.r_[coef, -1.0],
            0.0,
            np.inf,
        )
    if n_z:
        cols, ticks = np.concatenate(cap_cols), np.concatenate(cap_ticks)
        first = int(ticks.min())
        n_t = int(ticks.max()) - first + 1
        rows.add(ticks - first, cols, np.ones(len(cols)), -np.inf, capacity[first : first + n_t])
    A, lo, hi = rows.matrix(n_cols)
    c = np.zeros(n_cols)
    c[:n_z] = -1.0  # milp minimises; we maximise completions
    integrality = np.zeros(n_cols, np.int64)
    integrality[: n_cols if integral_nodes else n_z] = 1
    return _Model(tasks, node_cols, node_tick, c, A, lo, hi, np.concatenate(ub), integrality)


def _nodes(model: _Model, wl: Workload, i: int, sol: np.ndarray) -> np.ndarray:
    """Nodes of the ``i``-th task of ``model`` in each tick of its window under ``sol``."""
    k = model.tasks[i]
    span = int(wl.deadline[k] - wl.arrival[k])
    return np.bincount(model.node_tick[i], sol[model.node_cols[i]], minlength=span)


def _warm_gain(wl: Workload, k: int, x: np.ndarray, reassign_cost: bool) -> np.ndarray:
    """Work task ``k`` gains in each tick of its window from node counts ``x`` (maybe
    fractional: then the piecewise-linear interpolation of r n^alpha, as in the programme)."""
    warm = np.minimum(x[1:], x[:-1]) if reassign_cost else x
    levels = np.arange(wl.cap[k] + 1, dtype=np.float64)
    gain = wl.rate[k] * np.interp(warm, levels, levels ** wl.alpha[k])
    gain[warm <= 1e-9] = 0.0  # no warm node: no progress and no loss report
    return np.r_[np.zeros(len(x) - len(warm)), gain]


def _reach(wl: Workload, k: int, x: np.ndarray, reassign_cost: bool) -> int | None:
    """Index of the tick of the window in which ``x`` first gets task ``k`` to its work
    (within the solver's feasibility tolerance, as LP solutions reach it)."""
    gain = _warm_gain(wl, k, x, reassign_cost)
    need = float(_target(wl.work_true[k : k + 1])[0]) * (1 - _FEAS_TOL)
    got = np.flatnonzero((np.cumsum(gain) >= need) & (np.cumsum(gain > 0) > 0))
    return int(got[0]) if len(got) else None


def _keep_whole(
    model: _Model, wl: Workload, sol: np.ndarray, capacity: np.ndarray, reassign_cost: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Tasks an LP solution completes in full (checked here, not taken from the solver's
    tolerances), and the nodes they leave free per tick when each holds its LP nodes
    until done."""
    free = capacity.astype(np.float64)
    keep = np.zeros(len(wl), bool)
    for i in np.flatnonzero(sol[: len(model.tasks)] >= 1 - 1e-6):
        k = int(model.tasks[i])
        x = np.clip(_nodes(model, wl, i, sol), 0.0, wl.cap[k])
        end = _reach(wl, k, x, reassign_cost)
        if end is not None:
            keep[k] = True
            free[wl.arrival[k] : wl.arrival[k] + end + 1] -= x[: end + 1]
    return keep, np.maximum(free, 0.0)


def _solve(model: _Model, integral: bool, time_limit: float, node_limit: int | None) -> Any:
    """HiGHS on ``model`` (its LP relaxation unless ``integral``)."""
    options: dict[str, Any] = {"time_limit": max(time_limit, 1e-3)}
    if integral and node_limit is not None:
        options["node_limit"] = int(node_limit)
    return milp(
        model.c,
        constraints=LinearConstraint(model.A, model.lo, model.hi),
        integrality=model.integrality if integral else None,
        bounds=Bounds(0.0, model.ub),
        options=options,
    )


def workload_bound(
    wl: Workload,
    num_nodes: int,
    reassign_cost: bool = True,
    time_limit: float = DEFAULT_TIME_LIMIT,
    integral_nodes: bool = False,
    node_limit: int | None = None,
) -> BoundResult:
    """Upper bound on the tasks of ``wl`` any scheduler completes on ``num_nodes`` nodes.

    The LP relaxation's optimum, rounded down, is already a bound.  A feasible point tries
    to reach it: the tasks the LP completes in full, on their LP nodes, plus the most of
    those it left fractional that the programme restricted to them completes on the nodes
    left free.  Only if it falls short does HiGHS branch on the whole programme, within
    what is left of ``time_limit`` seconds (all solves together); its proven dual bound
    then stands, optimal or not; ``node_limit`` also stops each branching after that many
    branch-and-bound nodes (a limit that, unlike time, gives the same answer on every
    machine).  ``integral_nodes`` makes node counts integer: tighter (time-sharing a node
    then pays its warm-ups), but far slower.
    """
    start = time.perf_counter()

    def left() -> float:
        return time_limit - (time.perf_counter() - start)

    capacity = np.full(int(wl.deadline.max(initial=0)) + 1, float(num_nodes))
    model = _build(
        wl, np.flatnonzero(candidates(wl, reassign_cost)), capacity, reassign_cost, integral_nodes
    )
    n_z = len(model.tasks)
    upper, best = n_z, np.zeros(len(wl), bool)
    if n_z:
        lp_start = time.perf_counter()
        lp = _solve(model, False, left(), node_limit)
        lp_seconds = time.perf_counter() - lp_start
        if lp.status == 0:
            upper = math.floor(-lp.fun + _ROUND_TOL)
            if not integral_nodes:
                best, free = _keep_whole(model, wl, lp.x, capacity, reassign_cost)
                rest = model.tasks[(lp.x[:n_z] > 1e-6) & ~best[model.tasks]]
                if best.sum() < upper and len(rest) and left() > 0:
                    sub = _build(wl, rest, free, reassign_cost, integral_nodes)
                    res = _solve(sub, True, left(), node_limit)
                    if res.x is not None:
                        best[rest[res.x[: len(rest)] > 0.5]] = True
        # branching first solves this LP again: with less time left it cannot help
        if best.sum() < upper and left() > lp_seconds:
            res = _solve(model, True, left(), node_limit)
            dual = getattr(res, "mip_dual_bound", None)
            if dual is not None and np.isfinite(dual):
                upper = min(upper, math.floor(-dual + _ROUND_TOL))
            if res.x is not None and (res.x[:n_z] > 0.5).sum() > best.sum():
                best = np.zeros(len(wl), bool)
                best[model.tasks[res.x[:n_z] > 0.5]] = True
    # a bound below a feasible point would be the solver's rounding, not a proof
    found = int(best.sum())
    upper = max(upper, found)
    n = len(wl)
    cand = np.zeros(n, bool)
    cand[model.tasks] = True
    return BoundResult(
        completed_bound=float(upper),
        tasks=n,
        completion_rate=upper / n if n else float("nan"),
        status="optimal" if found == upper else "limit",
        gap=(upper - found) / upper if upper else 0.0,
        seconds=time.perf_counter() - start,
        best_found=found,
        completes=best,
        candidates=cand,
    )


def episode_workload(config: ClusterConfig, traces: TraceSet, seed: int) -> Workload:
    """The tasks of episode ``seed``, drawn exactly as :func:`mara_env.schedulers.run_episode`
    draws them for every scheduler."""
    sim = ClusterSim(config, traces)
    sim.reset(np.random.default_rng(seed))
    return sim.workload


def _cache_key(
    wl: Workload, config: ClusterConfig, integral_nodes: bool, node_limit: int | None
) -> str:
    """Digest of everything the programme reads (so a key never outlives its inputs)."""
    h = hashlib.sha256(
        repr(
            (FORMULATION, config.num_nodes, whole_tick(config), integral_nodes, node_limit)
        ).encode()
    )
    for name in ("arrival", "deadline", "cap", "alpha", "rate", "work_true"):
        h.update(np.ascontiguousarray(getattr(wl, name)).tobytes())
    return h.hexdigest()[:32]


def episode_bound(
    config: ClusterConfig,
    traces: TraceSet,
    seed: int,
    time_limit: float = DEFAULT_TIME_LIMIT,
    integral_nodes: bool = False,
    cache_dir: str | os.PathLike | None = None,
    node_limit: int | None = None,
) -> BoundResult:
    """The bound of episode ``seed`` (see :func:`workload_bound`).

    With ``cache_dir`` (default: the environment variable ``MARA_BOUND_CACHE``; unset or
    ``""``: no cache) results are kept there, one JSON file per programme; a cached
    result is reused when it was optimal or solved with at least ``time_limit`` seconds.
    """
    wl = episode_workload(config, traces, seed)
    return _cached_bound(wl, config, time_limit, integral_nodes, cache_dir, node_limit)


def _cached_bound(
    wl: Workload,
    config: ClusterConfig,
    time_limit: float,
    integral_nodes: bool,
    cache_dir: str | os.PathLike | None,
    node_limit: int | None = None,
) -> BoundResult:
    """:func:`workload_bound` of ``wl`` through the cache of :func:`episode_bound`."""
    where = cache_dir if cache_dir is not None else os.environ.get("MARA_BOUND_CACHE")
    key = _cache_key(wl, config, integral_nodes, node_limit)
    path = Path(where) / f"{key}.json" if where else None
    if path is not None and path.exists():
        try:
            got = json.loads(path.read_text())
            if got["status"] == "optimal" or got["time_limit"] >= time_limit:
                return _from_json(got, len(wl))
        except (ValueError, KeyError, TypeError, IndexError):  # not an entry: solved again
            pass
    result = workload_bound(
        wl, config.num_nodes, whole_tick(config), time_limit, integral_nodes, node_limit
    )
    if path is not None:  # a temporary file of its own: workers may write the same key
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(_to_json(result, time_limit)))
    return result


def _to_json(r: BoundResult, time_limit: float) -> dict[str, Any]:
    """A cache entry: the result (task sets as indices) and the limit it was solved with."""
    return {
        "completed_bound": r.completed_bound,
        "status": r.status,
        "gap": r.gap,
        "seconds": r.seconds,
        "best_found": r.best_found,
        "completes": np.flatnonzero(r.completes).tolist(),
        "candidates": np.flatnonzero(r.candidates).tolist(),
        "time_limit": time_limit,
    }


def _from_json(d: dict[str, Any], n: int) -> BoundResult:
    """The result a cache entry holds, for an episode of ``n`` tasks."""
    completes = np.zeros(n, bool)
    completes[d["completes"]] = True
    cand = np.zeros(n, bool)
    cand[d["candidates"]] = True
    return BoundResult(
        completed_bound=float(d["completed_bound"]),
        tasks=n,
        completion_rate=d["completed_bound"] / n if n else float("nan"),
        status=d["status"],
        gap=d["gap"],
        seconds=d["seconds"],
        best_found=d["best_found"],
        completes=completes,
        candidates=cand,
    )


def run_bound_episode(
    config: ClusterConfig,
    traces: TraceSet,
    seed: int,
    node_limit: int | None = HARNESS_NODE_LIMIT,
    time_limit: float = HARNESS_TIME_LIMIT,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The bound as a row of the results table, keyed like ``ClusterSim.metrics()``.

    ``completion_rate`` and ``completed`` are the bound; ``tasks`` and ``tasks_<family>``
    count the episode's tasks.  ``completed_<family>`` split the best solution found: with
    ``bound_status`` ``"optimal"`` the tasks one optimal solution of the relaxation
    completes (another optimum may split differently, so these are no per-family bounds),
    after a time limit a solution with fewer completions than the bound.  Metrics of a
    schedule, which the bound does not have (expired tasks, utilisation, node-ticks,
    re-assignments, ticks), are NaN.  The branching stops after ``node_limit``
    branch-and-bound nodes, so the row is the same on every machine (``bound_status``
    ``"limit"`` then means that limit, or the safety ``time_limit``, was reached before
    optimality was proven; the bound holds either way).
    """
    wl = episode_workload(config, traces, seed)
    r = _cached_bound(wl, config, time_limit, False, cache_dir, node_limit)
    out: dict[str, Any] = {name: float("nan") for name in METRICS}
    out.update(
        completion_rate=r.completion_rate,
        tasks=r.tasks,
        completed=r.completed_bound,
        bound_status=r.status,
        bound_gap=r.gap,
    )
    task_family = traces.families[wl.trace]
    for fam in sorted(set(traces.families.tolist())):
        mine = task_family == fam
        out[f"tasks_{fam}"] = int(mine.sum())
        out[f"completed_{fam}"] = int((mine & r.completes).sum())
    return out
