"""Typed, validated configuration of the cluster simulator and its environment."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass
from typing import Any

from mara_env.job_logs import SHIPPED_JOBS
from mara_env.traces import SPLITS

THROUGHPUT_MODES = ("known", "measured")
# How a task's deadline follows from its user's estimate of its size (env v3), and each
# model's default ``slack_range``: the padded one chosen on val so that uniform share's
# completion at load 1 stays near env v2's (``docs/architecture.md``).
DEADLINE_MODELS = {
    "padded": (0.75, 1.25),
    "unbiased": (1.5, 2.5),
    "blind": (1.5, 2.5),
}
# Round values (ticks) a padded estimate snaps up to; the last is the queue's maximum.
ESTIMATE_MENU = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it and what is allowed."""


@dataclass(frozen=True)
class ClusterConfig:
    """Everything that defines a workload and a cluster; see ``docs/architecture.md``.

    Task ``k`` gets a trace, a target index ``j`` drawn uniformly in ``target_range`` of
    the trace's logged points (required work ``W_k = step[j]``, target ``eps_k`` =
    smoothed loss at ``j``), a parallelism cap from ``cap_choices``, a speed-up exponent
    ``alpha`` in ``alpha_range`` (``s(n) = n**alpha``), a size ``T_k`` (ticks to reach
    ``W_k`` on ``n_ref = min(cap, ref_nodes)`` nodes, log-uniform in ``size_range``) that
    sets the base rate ``r_k = W_k / (T_k * n_ref**alpha)``, and a deadline
    ``a_k + ceil(slack * E_k)`` with slack uniform in ``slack_range`` (None: the
    ``deadline_model``'s default, :data:`DEADLINE_MODELS`) and ``E_k`` the user's estimate
    of the size, drawn by ``deadline_model``:

    * ``"padded"`` (default): a padded upper bound, as users give them (published HPC logs:
      ``shared/USER_ESTIMATES.md``): ``T_k * estimate_padding * exp(estimate_spread * z)``
      snapped up to the next value of ``estimate_menu`` (ticks; larger: its last value, the
      queue's maximum), and with probability ``estimate_top_share`` that maximum outright;
    * ``"unbiased"`` (env v2's rule): ``T_k * exp(deadline_sigma * z)``;
    * ``"blind"``: ``T'_k * exp(deadline_sigma * z)`` with ``T'_k`` another task's size drawn
      from the same distribution: the deadlines of ``unbiased``, saying nothing of the task.

    ``z`` is standard normal.  No scheduler is told the model; what deadlines say about
    work is learnt from a history of finished tasks (:mod:`flow_predictor.deadline_prior`).

    With ``jobs`` (``"philly"``, the shipped Philly trace, or a table from ``mara jobs
    import``) an episode replays one day of a cluster's jobs instead (``docs/jobs.md``): a
    day of the split (the trace's days are split by a hash of their date into the split
    names of the trace library) that can carry ``load``, drawn by the seed; the hours
    ``jobs_hours`` of that day squeezed into ``horizon`` ticks (default: 24 h in 120 ticks,
    12 min a tick), a job arriving at the tick of its submission. A job's reference
    allocation ``n_ref`` is its GPUs (at most ``num_nodes``), its cap
    ``min(num_nodes, ceil(jobs_cap_multiple * n_ref))``, its size ``T_k`` its duration in
    ticks clipped to ``jobs_size_range``; its trace, target and ``alpha`` are drawn as
    above, and its deadline by the rule above unless the trace gives one. Load is set by
    thinning: the day's jobs in a random order, the prefix whose implied load
    ``sum(n_ref * T) / (num_nodes * horizon)`` is nearest ``load``; days whose own load is
    below ``load`` are never drawn. ``cap_choices``, ``size_range`` and ``ref_nodes`` are
    then unused.

    ``reassign_cost``: a node that joins a task loses its whole first tick (``True``, the
    default), nothing (``False``), or that share of it (a number in [0, 1], e.g. a live
    cluster's measured restore time over the tick).

    ``throughput_noise``: the coefficient of variation of a task's work in a tick (0: every
    tick gains exactly ``rate * n**alpha``; otherwise that times a log-normal factor of
    mean 1, drawn per task and tick), as a live cluster's steady slices vary.  ``mara
    calibrate`` fits it, ``reassign_cost`` and ``alpha_range`` from live runs.

    ``throughput``: ``"known"`` hands schedulers each task's true ``rate`` and ``alpha``;
    ``"measured"`` hands them estimates fitted to the work tasks gained so far
    (:mod:`mara_env.throughput`), what a live cluster can offer.
    """

    num_nodes: int = 16
    num_slots: int = 8
    load: float = 1.0
    horizon: int = 120
    traces: str | None = None
    split: str = "train"
    families: tuple[str, ...] | None = None
    target_range: tuple[float, float] = (0.3, 0.9)
    size_range: tuple[float, float] = (4.0, 24.0)
    deadline_model: str = "padded"
    slack_range: tuple[float, float] | None = None
    deadline_sigma: float = 0.5
    estimate_padding: float = 2.2
    estimate_spread: float = 1.0
    estimate_top_share: float = 0.1
    estimate_menu: tuple[float, ...] = ESTIMATE_MENU
    alpha_range: tuple[float, float] = (0.6, 1.0)
    cap_choices: tuple[int, ...] = (2, 4, 8)
    ref_nodes: int = 4
    reassign_cost: bool | float = True
    shaping: float = 1.0
    max_cycles: int | None = None
    strict: bool = False
    jobs: str | None = None
    jobs_hours: tuple[float, float] = (0.0, 24.0)
    jobs_cap_multiple: float = 2.0
    jobs_size_range: tuple[float, float] = (1.0, 120.0)
    throughput: str = "known"
    throughput_noise: float = 0.0

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"config {name}={getattr(self, name)!r}: expected {expected}")

        def number_in(v: Any, lo: float, hi: float) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi

        for name in ("traces", "jobs"):  # a path may be given as a Path
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        for name, hint in _hints().items():  # types first: each later rule reads a typed value
            value = getattr(self, name)
            if not _typed(value, hint):
                raise bad(name, _expected(hint))
        for name in ("num_nodes", "num_slots", "horizon", "ref_nodes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad(name, "a positive integer")
        if not (isinstance(self.load, (int, float)) and 0 < self.load <= 100):
            raise bad("load", "a number in (0, 100]")
        if self.split not in (*SPLITS, "all"):
            raise bad("split", f"one of {[*SPLITS, 'all']}")
        if self.deadline_model not in DEADLINE_MODELS:
            raise bad("deadline_model", f"one of {list(DEADLINE_MODELS)}")
        for name, lo, hi in (
            ("target_range", 0.0, 1.0),
            ("slack_range", 0.01, 100.0),
            ("alpha_range", 0.0, 1.0),
            ("size_range", 1.0, 10_000.0),
            ("jobs_hours", 0.0, 24.0),
            ("jobs_size_range", 1.0, 10_000.0),
        ):
            if name == "slack_range" and self.slack_range is None:
                continue  # the model's default (``deadline_slack``)
            v = tuple(getattr(self, name))
            if len(v) != 2 or not (lo <= v[0] <= v[1] <= hi):
                raise bad(name, f"a pair (low, high) with {lo} <= low <= high <= {hi}")
            object.__setattr__(self, name, (float(v[0]), float(v[1])))
        caps = tuple(self.cap_choices)
        if not caps or any(not isinstance(c, int) or c < 1 for c in caps):
            raise bad("cap_choices", "a non-empty list of positive integers")
        object.__setattr__(self, "cap_choices", caps)
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))
        if self.max_cycles is not None and (
            not isinstance(self.max_cycles, int) or self.max_cycles < 1
        ):
            raise bad("max_cycles", "None or a positive integer (decision rounds)")
        if not number_in(self.deadline_sigma, 0, 3):
            raise bad("deadline_sigma", "a number in [0, 3] (log-normal spread of deadlines)")
        if not number_in(self.estimate_padding, 0.01, 1000):
            raise bad("estimate_padding", "a number in [0.01, 1000] (median padding factor)")
        if not number_in(self.estimate_spread, 0, 5):
            raise bad("estimate_spread", "a number in [0, 5] (log-normal spread of estimates)")
        if not number_in(self.estimate_top_share, 0, 1):
            raise bad("estimate_top_share", "a probability in [0, 1]")
        menu = tuple(self.estimate_menu)
        if (
            not menu
            or not all(number_in(v, 1e-3, 1e6) for v in menu)
            or list(menu) != sorted(set(menu))
        ):
            raise bad("estimate_menu", "increasing numbers of ticks in [0.001, 1e6]")
        object.__setattr__(self, "estimate_menu", tuple(float(v) for v in menu))
        if not (isinstance(self.shaping, (int, float)) and self.shaping >= 0):
            raise bad("shaping", "a number >= 0")
        if self.jobs_hours[0] == self.jobs_hours[1]:
            raise bad("jobs_hours", "a pair (first hour, last hour) of a day, first < last")
        if not number_in(self.jobs_cap_multiple, 1, 64):
            raise bad("jobs_cap_multiple", "a number in [1, 64] (cap = multiple x the job's GPUs)")
        cost = self.reassign_cost
        if not (isinstance(cost, (bool, int, float)) and 0 <= cost <= 1):
            raise bad(
                "reassign_cost",
                "true, false, or the share of a tick in [0, 1] a joining node loses",
            )
        if not number_in(self.throughput_noise, 0, 10):
            raise bad("throughput_noise", "a coefficient of variation in [0, 10] (0: none)")
        if self.throughput not in THROUGHPUT_MODES:
            raise bad("throughput", f"one of {list(THROUGHPUT_MODES)}")
        self._check_deadlines_possible()
        for name in _hints():  # what no rule above gives a range
            if not _finite(getattr(self, name)):
                raise bad(name, "a finite number")
        if self.jobs is not None:
            if not isinstance(self.jobs, str) or not (
                self.jobs in SHIPPED_JOBS or self.jobs.endswith((".parquet", ".pq"))
            ):
                raise bad("jobs", f"None, one of {sorted(SHIPPED_JOBS)} or a .parquet jobs table")
            if self.jobs not in SHIPPED_JOBS and not os.path.isfile(self.jobs):
                raise bad("jobs", "an existing jobs table (make one with `mara jobs import`)")

    def _check_deadlines_possible(self) -> None:
        """Refuse a padded model whose every deadline is shorter than any task can take:
        an estimate never exceeds the menu's largest value, and a task runs at most
        ``(cap / n_ref) ** alpha`` times faster than its size says."""
        if self.deadline_model != "padded" or self.jobs is not None:
            return
        longest = math.ceil(self.deadline_slack[1] * self.estimate_menu[-1])
        cap = max(self.cap_choices)
        fastest = self.size_range[0] / (cap / min(cap, self.ref_nodes)) ** self.alpha_range[1]
        if longest < fastest:
            raise ConfigError(
                f"config estimate_menu={list(self.estimate_menu)}: every deadline would be at "
                f"most {longest} tick(s) after arrival (slack up to "
                f"{self.deadline_slack[1]:g} x the menu's largest estimate "
                f"{self.estimate_menu[-1]:g}), but the quickest task takes {fastest:.3g} "
                f"ticks (size_range from {self.size_range[0]:g}): no task could complete; "
                "expected a menu that reaches the tasks' sizes"
            )

    @property
    def deadline_slack(self) -> tuple[float, float]:
        """``slack_range``, or the ``deadline_model``'s default when it is None."""
        return self.slack_range or DEADLINE_MODELS[self.deadline_model]

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "env config") -> ClusterConfig:
        """Build from a plain dict (YAML), rejecting unknown keys by name."""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys: {allowed}")
        return cls(**values)  # lists become tuples once their types are checked

    def replace(self, **changes: Any) -> ClusterConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def load_cluster_file(
    path: str | os.PathLike, reserved: dict[str, str] | None = None, option: str = "--cluster"
) -> dict[str, Any]:
    """The :class:`ClusterConfig` settings of a cluster file (YAML, as ``mara calibrate``
    writes it), each key known and of its field's type, checked together; ``reserved``
    maps the keys a command sets from its own options (``num_nodes`` -> ``--nodes``),
    which the file may not set.  :class:`ConfigError` names ``option``, the file and the
    key."""
    import yaml

    from mara_env.yaml_file import load_yaml

    where = f"{option} {os.fspath(path)}"
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: no such file (write one with `mara calibrate`)")
    try:
        with open(path, encoding="utf-8") as f:
            data = load_yaml(f.read())
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"{where}: expected a mapping of ClusterConfig keys")
    for key, flag in (reserved or {}).items():
        if key in data:
            raise ConfigError(f"{where}: {key!r} is set by {flag}, not by a cluster file")
    try:  # unknown keys, then each value's type, then the values together
        config = ClusterConfig.from_dict(data, where=where)
    except ConfigError as exc:
        raise ConfigError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    return {key: getattr(config, key) for key in data}


@functools.cache
def _hints() -> dict[str, Any]:
    """Each :class:`ClusterConfig` field's type."""
    return typing.get_type_hints(ClusterConfig)


def _finite(value: Any) -> bool:
    """Whether every number of ``value`` (one, or a tuple of them) is finite."""
    if isinstance(value, (tuple, list)):
        return all(map(_finite, value))
    return not isinstance(value, (int, float)) or math.isfinite(value)


def _typed(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the field type ``hint`` (a list for a tuple, as YAML has)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_typed(value, arm) for arm in args)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        each = args[:1] * len(value) if args[-1:] == (Ellipsis,) else args
        return len(each) == len(value) and all(map(_typed, value, each))
    if hint is type(None):
        return value is None
    if hint is bool or isinstance(value, bool):
        return hint is bool and isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float))  # a numpy float is a float
    return isinstance(value, hint)


def _expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in a user's words."""
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _expected(a) for a in args)
    if origin is tuple:
        each = _expected(args[0]).removeprefix("a ").removeprefix("an ") + "s"
        if args[-1:] == (Ellipsis,):
            return f"a list of {each}"
        return f"a pair (low, high) of {each}" if len(args) == 2 else f"a list of {each}"
    return words.get(hint, str(hint))
