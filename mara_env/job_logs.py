"""Cluster job logs: a GPU cluster's job log read into one validated jobs table.

A jobs table (Parquet, written by ``mara jobs import``) has one row per job:

* ``job_id`` (text), ``submit_s`` (seconds since midnight of the trace's first day, or
  since its first submission when the log gives plain seconds), ``duration_s`` (run time
  in seconds), ``gpus`` (GPUs the job ran on);
* optionally ``deadline_s`` (same clock as ``submit_s``; empty where a job has none),
  ``user`` and ``name``;
* ``day`` (days since the first day), ``date`` (``YYYY-MM-DD``, or ``day-N`` for plain
  seconds) and ``split``: each day goes wholly to train, val or test by a stable hash of
  its date (:func:`mara_env.traces.hash_split`), the names of the trace library's splits.

Readers: ``philly`` (the flattened CSV ``timestamp,duration,num_gpus[,gpu_time,cluster]``
of Pollux's simulator, or msr-fiddle's ``cluster_job_log`` JSON), ``helios`` (SenseTime's
``cluster_log.csv``) and ``csv`` (any table, columns named by a map).  Bad input raises
:class:`JobsError` naming the file, the row, the column and the log's own value; no value
is changed quietly.  Replaying a table's days is :mod:`mara_env.replay`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mara_env import json_file
from mara_env.atomic import atomic_path
from mara_env.traces import SPLITS, hash_split, read_table, show_cell

FORMATS = ("philly", "helios", "csv")
SHIPPED_JOBS = {"philly": Path(__file__).parent / "data" / "philly_jobs.parquet"}
COLUMNS = ("job_id", "submit_s", "duration_s", "gpus")
OPTIONAL_COLUMNS = ("deadline_s", "user", "name")
DAY_COLUMNS = ("day", "date", "split")
DAY_S = 86400.0
# --map keys: the roles a column can play; one of duration/end is required
MAP_REQUIRED = ("submit", "gpus")
MAP_OPTIONAL = ("duration", "end", "start", "deadline", "job_id", "user", "name")
# the columns of each fixed format, by role
PHILLY_CSV = {"submit": "timestamp", "duration": "duration", "gpus": "num_gpus"}
HELIOS = {"submit": "submit_time", "gpus": "gpu_num", "job_id": "job_id", "user": "user"}
TIMING = ("duration", "end", "start")
# The largest values a jobs table stores (duration_s is float32, gpus int16): a log's value
# above them is refused, never stored as inf or wrapped round to another number.
MAX_DURATION_S = float(np.finfo(np.float32).max)
MAX_GPUS = int(np.iinfo(np.int16).max)
MAX_DAYS = int(np.iinfo(np.int32).max)  # the day column is int32


class JobsError(ValueError):
    """A job log or jobs table is malformed; the message names file, row and column."""


@dataclass(frozen=True)
class Filters:
    """Which jobs of a log are left out, as Pollux's workload generator leaves them out."""

    min_duration_s: float = 60.0  # shorter jobs are dropped, and zero-duration ones always
    max_gpu_hours: float = 1000.0  # jobs with duration x GPUs at or above this are dropped


@dataclass(frozen=True)
class Imported:
    """A normalised jobs table and how many jobs of the log each rule left out."""

    table: pd.DataFrame
    dropped: dict[str, int]


def parse_map(text: str) -> dict[str, str]:
    """The roles -> columns of ``--map submit=COL,gpus=COL,duration=COL|end=COL[,...]``."""
    allowed = (*MAP_REQUIRED, *MAP_OPTIONAL)
    expected = (
        "comma-separated ROLE=COLUMN with submit, gpus and duration or end (optionally start, "
        "deadline, job_id, user, name)"
    )
    mapping: dict[str, str] = {}
    for item in (x.strip() for x in text.split(",")):
        role, sep, column = (s.strip() for s in item.partition("="))
        if not sep or not role or not column:
            raise JobsError(f"--map {text!r}: {item!r} is not ROLE=COLUMN; expected {expected}")
        if role not in allowed:
            raise JobsError(f"--map {text!r}: unknown role {role!r}; expected one of {allowed}")
        if role in mapping:
            raise JobsError(f"--map {text!r}: {role!r} is given twice; give each role once")
        mapping[role] = column
    missing = [r for r in MAP_REQUIRED if r not in mapping]
    if missing:
        raise JobsError(f"--map {text!r}: no {' or '.join(missing)}; expected {expected}")
    if ("duration" in mapping) == ("end" in mapping):
        raise JobsError(f"--map {text!r}: give exactly one of duration= and end=")
    if "start" in mapping and "end" not in mapping:
        raise JobsError(f"--map {text!r}: start= needs end= (duration = end - start)")
    return mapping


def read_job_log(
    path: str | os.PathLike,
    fmt: str = "philly",
    mapping: dict[str, str] | None = None,
    filters: Filters = Filters(),
) -> Imported:
    """Read a job log of format ``fmt`` (``mapping``: the columns of format ``csv``)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise JobsError(f"{path}: unknown format {fmt!r}; expected one of {list(FORMATS)}")
    if (mapping is not None) != (fmt == "csv"):
        raise JobsError(f"{path}: format {fmt!r}: a column map goes with format 'csv' only")
    if not path.is_file():
        raise JobsError(f"{path}: no such job log file")
    if path.stat().st_size == 0:
        raise JobsError(f"{path}: the file is empty; expected a job log with a header and jobs")
    dropped: dict[str, int] = {}
    if fmt == "philly" and path.suffix == ".json":
        raw, roles = _philly_json(path, dropped), {"submit": "submit", "duration": "duration"}
        roles.update(gpus="gpus", job_id="job_id", user="user")
    else:
        raw = read_table(path, JobsError, text=True)
        if fmt == "philly":
            roles = dict(PHILLY_CSV)
        elif fmt == "helios":
            roles = dict(HELIOS)
            # cluster_log.csv has duration = end - start; older copies only the times
            if "duration" in raw.columns or "end_time" not in raw.columns:
                roles["duration"] = "duration"
            else:
                roles.update(start="start_time", end="end_time")
        else:
            roles = dict(mapping or {})
        # the fixed formats' optional columns (ids, users) may be absent
        optional = {"job_id", "user"}
        roles = {r: c for r, c in roles.items() if c in raw.columns or r not in optional}
    table = _normalise(raw, roles, str(path), fmt, filters, dropped)
    return Imported(table, dropped)


def _philly_json(path: Path, dropped: dict[str, int]) -> pd.DataFrame:
    """msr-fiddle's ``cluster_job_log``: run time summed over attempts, GPUs of the last."""
    try:
        jobs = json_file.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise JobsError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(jobs, list):
        raise JobsError(f"{path}: expected a JSON list of jobs (Philly's cluster_job_log)")
    rows, index = [], []
    for i, job in enumerate(jobs):
        if not isinstance(job, dict) or "submitted_time" not in job:
            raise JobsError(f"{path}: row {i}: expected a job object with 'submitted_time'")
        attempts = job.get("attempts") or []
        times = [(a.get("start_time"), a.get("end_time")) for a in attempts]
        if not attempts or any(s is None or e is None for s, e in times):
            # never scheduled, still running when the log was taken, or a logging gap
            dropped["unfinished"] = dropped.get("unfinished", 0) + 1
            continue
        try:
            start, end = (pd.to_datetime([t[k] for t in times]) for k in (0, 1))
        except (ValueError, TypeError):
            raise JobsError(f"{path}: row {i}: attempts: unparsable start/end time") from None
        detail = attempts[-1].get("detail") or []
        rows.append(
            {
                "submit": job["submitted_time"],
                "duration": float(np.sum((end - start).total_seconds())),
                "gpus": sum(len(d.get("gpus") or []) for d in detail),
                "job_id": job.get("jobid", str(i)),
                "user": job.get("user"),
            }
        )
        index.append(i)
    if not rows:
        raise JobsError(f"{path}: no finished job in the log")
    return pd.DataFrame(rows, index=index)


def _normalise(
    raw: pd.DataFrame,
    roles: dict[str, str],
    origin: str,
    fmt: str,
    filters: Filters,
    dropped: dict[str, int],
) -> pd.DataFrame:
    """The jobs table of a raw log whose columns play ``roles``; raises on bad values."""
    needed = list(dict.fromkeys(roles.values()))
    missing = [c for c in needed if c not in raw.columns]
    if missing:
        raise JobsError(
            f"{origin}: missing column(s) {missing}; format {fmt!r} expects columns {needed}"
        )
    if len(raw) == 0:
        raise JobsError(f"{origin}: a header but no jobs")
    submit, stamped = _times(raw[roles["submit"]], origin)
    _first_bad(
        np.abs(submit - np.median(submit)) / DAY_S >= MAX_DAYS,
        raw[roles["submit"]],
        origin,
        f"is further than {MAX_DAYS} days from the log's other submissions; expected a "
        "time on the log's clock",
    )
    if "duration" in roles:
        duration = _numbers(raw[roles["duration"]], origin, "a run time in seconds >= 0")
        _first_bad(
            duration < 0,
            raw[roles["duration"]],
            origin,
            "is negative; expected a run time in seconds >= 0",
        )
    else:
        begin_col = roles.get("start", roles["submit"])
        begin = submit if begin_col == roles["submit"] else _times(raw[begin_col], origin)[0]
        end = _times(raw[roles["end"]], origin, stamped)[0]
        duration = end - begin
        _first_bad(
            duration < 0,
            raw[roles["end"]],
            origin,
            f"is before {begin_col}; expected an end time at or after it",
        )
    timing = raw[roles["duration"] if "duration" in roles else roles["end"]]
    _first_bad(
        duration > MAX_DURATION_S,
        timing,
        origin,
        f"is a run time longer than a jobs table holds; expected at most {MAX_DURATION_S:.4g} s",
    )
    gpus = _numbers(raw[roles["gpus"]], origin, "a whole number of GPUs")
    _first_bad(
        (gpus < 0) | (gpus != np.round(gpus)),
        raw[roles["gpus"]],
        origin,
        "is not a whole number >= 0; expected the GPUs the job ran on",
    )
    _first_bad(
        gpus > MAX_GPUS,
        raw[roles["gpus"]],
        origin,
        f"is more GPUs than any cluster runs a job on; expected at most {MAX_GPUS}",
    )
    keep = np.ones(len(raw), bool)
    if fmt == "helios":
        # Helios logs CPU-only jobs too (gpu_num 0): not GPU jobs, as its paper counts them
        _drop(keep, gpus == 0, "cpu_only", dropped)
    else:
        _first_bad(gpus == 0, raw[roles["gpus"]], origin, "is 0; expected a GPU job (>= 1 GPU)")
    out = pd.DataFrame({"job_id": _ids(raw, roles), "submit": submit})
    out["duration_s"] = duration.astype(np.float32)
    out["gpus"] = gpus.astype(np.int16)
    if "deadline" in roles:
        cells = raw[roles["deadline"]]
        present = cells.notna().to_numpy()
        deadline = np.full(len(raw), np.nan)
        deadline[present] = _times(cells[present], origin, stamped)[0]
        late = present & ~(deadline > submit)
        _first_bad(
            late,
            cells,
            origin,
            f"is not after {roles['submit']}; expected a deadline "
            "after the submission (or an empty cell)",
        )
        out["deadline"] = deadline
    for role in ("user", "name"):
        if role in roles:
            out[role] = raw[roles[role]].astype(str)
    short = (duration < filters.min_duration_s) | (duration == 0)
    _drop(keep, short, "shorter_than_min_duration", dropped)
    gpu_hours = duration * gpus / 3600.0
    _drop(keep, gpu_hours >= filters.max_gpu_hours, "gpu_hours_over_max", dropped)
    out = out[keep]
    if not len(out):
        raise JobsError(f"{origin}: no job left after the filters (left out: {dropped})")
    return _with_days(out, stamped)


def _ids(raw: pd.DataFrame, roles: dict[str, str]) -> np.ndarray:
    """The log's job ids, or its data row numbers where it has none."""
    if "job_id" in roles:
        return raw[roles["job_id"]].astype(str).to_numpy()
    return raw.index.astype(str).to_numpy()


def _drop(keep: np.ndarray, mask: np.ndarray, reason: str, dropped: dict[str, int]) -> None:
    mask = mask & keep
    if mask.any():
        dropped[reason] = dropped.get(reason, 0) + int(mask.sum())
    keep &= ~mask


def _first_bad(bad: np.ndarray, cells: pd.Series, origin: str, problem: str) -> None:
    """Raise naming the first row of ``bad``, its column and its cell value."""
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        # the log's own row numbers (data rows from 0; a JSON log's list index)
        row = cells.index[i]
        raise JobsError(f"{origin}: row {row}: {cells.name} {show_cell(cells.iloc[i])} {problem}")


def _numbers(cells: pd.Series, origin: str, expected: str) -> np.ndarray:
    values = pd.to_numeric(cells, errors="coerce").to_numpy(np.float64)
    _first_bad(~np.isfinite(values), cells, origin, f"is not a finite number; expected {expected}")
    return values


# A timestamp's timezone offset at its end: Z, +02:00, -0500
OFFSET = r"(Z|[+-]\d\d:?\d\d)$"


def _times(cells: pd.Series, origin: str, stamped: bool | None = None) -> tuple[np.ndarray, bool]:
    """Seconds of a time column (since the epoch for timestamps) and whether it held
    timestamps rather than plain seconds; ``stamped``: which of the two it must hold."""
    if pd.api.types.is_datetime64_any_dtype(cells):
        parsed = pd.Series(cells)
        _first_bad(parsed.isna().to_numpy(), cells, origin, "is not a time; expected a timestamp")
    else:
        numbers = pd.to_numeric(cells, errors="coerce")
        if numbers.notna().any() and stamped is not True:
            _first_bad(
                ~np.isfinite(numbers.to_numpy(np.float64)),
                cells,
                origin,
                "is not a time; expected seconds, as the column's other rows",
            )
            return numbers.to_numpy(np.float64), False
        offsets = cells.astype(str).str.strip().str.extract(OFFSET, expand=False)
        given = offsets.notna().to_numpy()
        if given.any():
            _first_bad(
                ~given & cells.notna().to_numpy(),
                cells,
                origin,
                "has no timezone offset where other rows have one; expected an offset on "
                "every time, or on none",
            )
        # offsets that differ (a summer and a winter time) are compared in UTC
        utc = offsets.dropna().str.replace(":", "").nunique() > 1
        parsed = pd.to_datetime(cells, errors="coerce", format="ISO8601", utc=utc)
        _first_bad(
            parsed.isna().to_numpy(),
            cells,
            origin,
            "is not a time; expected seconds or a timestamp YYYY-MM-DD HH:MM:SS",
        )
    if stamped is False:
        _first_bad(
            np.ones(len(cells), bool),
            cells,
            origin,
            "is a timestamp; expected seconds, as the submission times",
        )
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_localize(None)
    seconds = (parsed - pd.Timestamp(0)).dt.total_seconds().to_numpy(np.float64)
    return seconds, True


def _with_days(jobs: pd.DataFrame, stamped: bool) -> pd.DataFrame:
    """``submit_s`` on the trace's clock, ``day``, ``date`` and the day's ``split``."""
    submit = jobs.pop("submit").to_numpy(np.float64)
    if stamped:
        origin = np.floor(submit.min() / DAY_S) * DAY_S  # midnight of the first day
    else:
        origin = submit.min()
    clock = submit - origin
    day = np.floor(clock / DAY_S).astype(np.int64)
    if stamped:
        first = pd.Timestamp(origin, unit="s")
        labels = {d: (first + pd.Timedelta(days=int(d))).strftime("%Y-%m-%d") for d in set(day)}
    else:
        labels = {d: f"day-{d}" for d in set(day)}
    date = np.array([labels[d] for d in day], dtype=object)
    out = pd.DataFrame({"job_id": jobs["job_id"].to_numpy(), "submit_s": clock})
    out["duration_s"] = jobs["duration_s"].to_numpy()
    out["gpus"] = jobs["gpus"].to_numpy()
    if "deadline" in jobs.columns:
        out["deadline_s"] = jobs["deadline"].to_numpy(np.float64) - origin
    for col in ("user", "name"):
        if col in jobs.columns:
            out[col] = jobs[col].to_numpy()
    out["day"] = day.astype(np.int32)
    out["date"] = date
    out["split"] = [hash_split(d) for d in date]
    return out.sort_values("submit_s", kind="stable").reset_index(drop=True)


def validate_jobs(df: pd.DataFrame, origin: str) -> pd.DataFrame:
    """Check a jobs table as :func:`write_jobs` writes it; return it typed."""
    need = [*COLUMNS, *DAY_COLUMNS]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise JobsError(
            f"{origin}: missing column(s) {missing}; expected a jobs table from "
            f"`mara jobs import` with columns {need}"
        )
    if not len(df):
        raise JobsError(f"{origin}: the jobs table has no rows")
    out = df.reset_index(drop=True).copy()
    for col in ("submit_s", "duration_s", "gpus", "day"):
        values = pd.to_numeric(out[col], errors="coerce").to_numpy(np.float64)
        _first_bad(~np.isfinite(values), out[col], origin, "is not a finite number")
    _first_bad(
        out["duration_s"].to_numpy() <= 0,
        out["duration_s"],
        origin,
        "is not > 0; expected a run time in seconds",
    )
    _first_bad(out["gpus"].to_numpy() < 1, out["gpus"], origin, "is not >= 1 GPU")
    _first_bad(
        np.diff(out["submit_s"].to_numpy(), prepend=-np.inf) < 0,
        out["submit_s"],
        origin,
        "is before the previous row's; expected rows sorted by submission",
    )
    _first_bad(
        ~out["split"].isin(SPLITS).to_numpy(), out["split"], origin, f"is not one of {list(SPLITS)}"
    )
    if "deadline_s" in out.columns:
        d = out["deadline_s"].to_numpy(np.float64)
        _first_bad(
            d <= out["submit_s"].to_numpy(), out["deadline_s"], origin, "is not after submit_s"
        )
    for col in ("job_id", "date", "split", *(c for c in ("user", "name") if c in out.columns)):
        out[col] = out[col].astype(str)
    return out


def write_jobs(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Validate then write a jobs table atomically (Parquet): never a half-written file."""
    path = Path(path)
    if path.suffix not in (".parquet", ".pq"):
        raise JobsError(f"{path}: expected a .parquet file path for the jobs table")
    df = validate_jobs(df, str(path))
    for col in ("date", "split", *(c for c in ("user", "name") if c in df.columns)):
        df[col] = df[col].astype("category")  # few distinct values: stored once each
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False, compression="zstd")


def jobs_path(source: str | os.PathLike) -> Path:
    """The file of a jobs source: a shipped trace's name (``philly``) or a path."""
    return SHIPPED_JOBS.get(str(source), Path(source))


def read_jobs(source: str | os.PathLike) -> pd.DataFrame:
    """Read and validate a jobs table (a shipped name or a ``mara jobs import`` file)."""
    path = jobs_path(source)
    if not path.is_file():
        raise JobsError(f"{path}: no such jobs table (make one with `mara jobs import`)")
    if path.suffix not in (".parquet", ".pq"):
        raise JobsError(f"{path}: expected a .parquet jobs table from `mara jobs import`")
    return validate_jobs(read_table(path, JobsError), str(path))


def summary_lines(table: pd.DataFrame, dropped: dict[str, int] | None = None) -> list[str]:
    """A short account of a jobs table: jobs, days, GPU shares, duration quantiles."""
    per_day = table.groupby("day").size()
    splits = table.drop_duplicates("day")["split"].value_counts()
    lines = [
        f"{len(table)} jobs over {len(per_day)} days ("
        + ", ".join(f"{s} {int(splits.get(s, 0))}" for s in SPLITS)
        + f" days); jobs per day: median {per_day.median():g}, max {per_day.max()}"
    ]
    if dropped:
        lines.append("left out: " + ", ".join(f"{k} {v}" for k, v in dropped.items()))
    shares = table["gpus"].value_counts(normalize=True).sort_index()
    big = shares[shares.index > 8].sum()
    cells = [f"{g}: {100 * s:.1f} %" for g, s in shares.items() if g <= 8]
    lines.append("GPUs: " + ", ".join(cells + ([f">8: {100 * big:.1f} %"] if big else [])))
    q = table["duration_s"].quantile([0.1, 0.5, 0.9, 0.99]).to_numpy() / 60.0
    lines.append("duration (min): p10 {:.1f}, median {:.1f}, p90 {:.1f}, p99 {:.1f}".format(*q))
    return lines
