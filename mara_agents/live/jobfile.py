"""The job file of ``mara live``: which real training jobs arrive, with what target and deadline.

A YAML mapping with ``jobs:`` (a list) and optionally ``defaults:`` (keys merged into every
job) and ``load:`` (a label for the results tables, default 1.0)::

    defaults: {cap: 2}
    jobs:
      - name: digits-mlp        # unique; names its checkpoints and its curve
        trainer: tabular        # a registered trainer, or "package.module:Class"
        params: {width: 32}     # the trainer's hyper-parameters (checked by name and type)
        seed: 0                 # the job's own seed (weights, data order)
        target: 0.3             # held-out loss the job must reach
        arrival: 0              # tick at which it arrives (or arrival_s: seconds)
        deadline: 10            # ticks after its arrival (or deadline_s: seconds)
        cap: 2                  # at most this many nodes at once
        gpus: 1                 # the nodes it asks for (gang schedulers: FIFO, Tiresias)
        eval_every: 10          # steps between held-out evaluations (default: the trainer's)

Everything is checked before anything starts; an error names the file, the job and the
key, and what was expected.  Nothing in a job file is unpickled or executed: a trainer is
a name from :data:`mara_agents.live.trainers.TRAINERS` or an import path on the user's own
``PYTHONPATH``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mara_env.yaml_file import load_yaml

TOP_KEYS = ("jobs", "defaults", "load")
JOB_KEYS = (
    "name",
    "trainer",
    "params",
    "seed",
    "target",
    "arrival",
    "arrival_s",
    "deadline",
    "deadline_s",
    "cap",
    "gpus",
    "eval_every",
)


class JobFileError(ValueError):
    """A job file is missing, unreadable or invalid; the message names the culprit."""


@dataclass(frozen=True)
class LiveJob:
    """One real training job: what it trains, its target loss, when it arrives and is due."""

    name: str
    trainer: str
    target: float
    arrival: int  # tick
    deadline: int  # tick (absolute) by which it must reach ``target``
    cap: int
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    gpus: int = 1  # the reference allocation: what the job asks for
    eval_every: int = 10  # steps between evaluations; it stops at the first <= target

    def spec(self) -> dict[str, Any]:
        """What a worker needs to build, train and stop the job (plain data, no objects)."""
        return {
            "name": self.name,
            "trainer": self.trainer,
            "params": self.params,
            "seed": self.seed,
            "target": self.target,
            "eval_every": self.eval_every,
        }


@dataclass(frozen=True)
class JobFile:
    """A validated job file: its jobs (sorted by arrival, then file order) and its digest."""

    path: Path
    jobs: tuple[LiveJob, ...]
    load: float
    digest: str  # sha256 of the file's bytes: a resumed run must use the same file


def load_job_file(path: str | Path, tick_seconds: float, num_nodes: int) -> JobFile:
    """Read and check a job file; times in seconds become ticks of ``tick_seconds``."""
    path = Path(path)
    if not path.is_file():
        raise JobFileError(f"{path}: no such job file")
    raw = path.read_bytes()
    try:
        data = load_yaml(raw)
    except yaml.YAMLError as exc:
        raise JobFileError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise JobFileError(f"{path}: expected a mapping with a 'jobs' list at the top")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise JobFileError(f"{path}: unknown key(s) {unknown}; allowed: {list(TOP_KEYS)}")
    jobs, defaults = data.get("jobs"), data.get("defaults") or {}
    if not isinstance(jobs, list) or not jobs:
        raise JobFileError(f"{path}: 'jobs' must be a non-empty list of jobs")
    if not isinstance(defaults, dict):
        raise JobFileError(f"{path}: 'defaults' must be a mapping of job keys")
    for where, given in [("defaults", defaults), *((f"job {i}", j) for i, j in enumerate(jobs))]:
        bad = [k for k in given if not isinstance(k, str)] if isinstance(given, dict) else []
        if bad:
            raise JobFileError(
                f"{path}: {where}: key {bad[0]!r} is not a name; expected one of {list(JOB_KEYS)}"
            )
    load = data.get("load", 1.0)
    if not _number(load) or load <= 0:
        raise JobFileError(f"{path}: load={load!r}: expected a positive number (a table label)")
    parsed = [
        _job(path, i, _merge(defaults, job), tick_seconds, num_nodes) for i, job in enumerate(jobs)
    ]
    seen: set[str] = set()
    for job in parsed:
        if job.name in seen:
            raise JobFileError(f"{path}: job name {job.name!r} is used twice; names must be unique")
        seen.add(job.name)
    order = sorted(range(len(parsed)), key=lambda i: (parsed[i].arrival, i))
    return JobFile(
        path=path,
        jobs=tuple(parsed[i] for i in order),
        load=float(load),
        digest=hashlib.sha256(raw).hexdigest(),
    )


def _merge(defaults: dict, job: Any) -> Any:
    """``defaults`` under ``job``; a job's time in ticks or seconds overrides both forms."""
    if not isinstance(job, dict):
        return job
    given = {k.removesuffix("_s") for k in job}
    kept = {k: v for k, v in defaults.items() if k.removesuffix("_s") not in given}
    return {**kept, **job}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _job(path: Path, i: int, job: Any, tick_seconds: float, num_nodes: int) -> LiveJob:
    where = f"{path}: job {i}"
    if not isinstance(job, dict):
        raise JobFileError(f"{where}: expected a mapping of {list(JOB_KEYS)}")
    if isinstance(job.get("name"), str):
        where = f"{path}: job {job['name']!r}"
    unknown = sorted(set(job) - set(JOB_KEYS))
    if unknown:
        raise JobFileError(f"{where}: unknown key(s) {unknown}; allowed: {list(JOB_KEYS)}")
    for key in ("name", "trainer", "target", "cap"):
        if key not in job:
            raise JobFileError(f"{where}: missing key {key!r}")
    name, trainer = job["name"], job["trainer"]
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise JobFileError(f"{where}: name={name!r}: expected letters, digits, '-', '_' or '.'")
    if not isinstance(trainer, str):
        raise JobFileError(f"{where}: trainer={trainer!r}: expected a trainer name or module:Class")
    params = job.get("params") or {}
    if not isinstance(params, dict):
        raise JobFileError(f"{where}: params={params!r}: expected a mapping")
    seed = job.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise JobFileError(f"{where}: seed={seed!r}: expected an integer >= 0")
    target = job["target"]
    if not _number(target) or target <= 0:
        raise JobFileError(f"{where}: target={target!r}: expected a positive loss")
    cap = job["cap"]
    if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= num_nodes:
        raise JobFileError(f"{where}: cap={cap!r}: expected an integer in [1, {num_nodes}]")
    gpus = job.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= cap:
        raise JobFileError(f"{where}: gpus={gpus!r}: expected an integer in [1, cap={cap}]")
    arrival = _ticks(where, job, "arrival", tick_seconds, minimum=0)
    deadline = _ticks(where, job, "deadline", tick_seconds, minimum=1)
    if arrival is None:
        arrival = 0
    if deadline is None:
        raise JobFileError(f"{where}: missing key 'deadline' (ticks) or 'deadline_s' (seconds)")
    from mara_agents.live.trainers import default_eval_every, trainer_config

    try:
        trainer_config(trainer, params)
        eval_every = job.get("eval_every", default_eval_every(trainer))
    except ValueError as exc:
        raise JobFileError(f"{where}: {exc}") from None
    if not isinstance(eval_every, int) or isinstance(eval_every, bool) or eval_every < 1:
        raise JobFileError(f"{where}: eval_every={eval_every!r}: expected an integer >= 1 (steps)")
    return LiveJob(
        name=name,
        trainer=trainer,
        target=float(target),
        arrival=arrival,
        deadline=arrival + deadline,
        cap=cap,
        seed=seed,
        params=dict(params),
        gpus=gpus,
        eval_every=eval_every,
    )


def _ticks(where: str, job: dict, key: str, tick_seconds: float, minimum: int) -> int | None:
    """``key`` in ticks, or ``key_s`` in seconds rounded up to ticks; None if neither."""
    if key in job and f"{key}_s" in job:
        raise JobFileError(f"{where}: give {key!r} (ticks) or {key + '_s'!r} (seconds), not both")
    if key in job:
        v = job[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise JobFileError(f"{where}: {key}={v!r}: expected an integer >= {minimum} (ticks)")
        return v
    if f"{key}_s" in job:
        v = job[f"{key}_s"]
        if not _number(v) or v < 0:
            raise JobFileError(f"{where}: {key}_s={v!r}: expected a number of seconds >= 0")
        if minimum and v < minimum * tick_seconds:  # rounded up, it would be a longer one
            raise JobFileError(
                f"{where}: {key}_s={v!r}: shorter than {minimum} tick(s) of --tick-seconds "
                f"{tick_seconds:g}; expected at least {minimum * tick_seconds:g} seconds, or "
                "shorter ticks"
            )
        return max(minimum, math.ceil(v / tick_seconds - 1e-9))
    return None
