"""Trace library: real learning curves, their validation, splits, import and loading.

A *trace* is one training run's loss curve: ``loss`` at increasing cumulative work
``step``.  On disk a library is a long-form table (Parquet or CSV), one row per
logged point, with columns ``trace_id, family, source, step, loss`` and an optional
``split`` column (``train``/``val``/``test``).  Files without ``split`` get one by a
stable hash of ``source``, so all runs of one source always land in the same split.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mara_env.atomic import atomic_path

REQUIRED_COLUMNS = ("trace_id", "family", "source", "step", "loss")
SPLITS = ("train", "val", "test")
MIN_POINTS = 8
LOSS_FLOOR = 1e-4  # losses are logged as log(max(loss, LOSS_FLOOR)); RL losses can hit 0
SHIPPED_LIBRARY = Path(__file__).parent / "data" / "traces.parquet"


class TraceError(ValueError):
    """A trace file or table is malformed; the message names file, trace and row."""


def read_table(
    path: Path, error: type[ValueError] = TraceError, text: bool = False
) -> pd.DataFrame:
    """A Parquet or CSV table (``text``: CSV cells as text, empty ones missing), header
    names stripped of spaces (a CSV's cells too, of those after a comma); ``error``, one
    line naming ``path``, if it cannot be read or a name is empty or given twice."""
    if path.suffix in (".parquet", ".pq"):
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises many types for corrupt files
            raise error(f"{path}: not a readable Parquet file ({_first_line(exc)})") from None
    else:
        options = {"dtype": str, "keep_default_na": False, "na_values": [""]} if text else {}
        try:  # a space after a comma (``loss, split``) is not part of the name or value
            df = pd.read_csv(path, skipinitialspace=True, **options)
        except pd.errors.EmptyDataError:
            raise error(f"{path}: the file has no header; expected a CSV table") from None
        except Exception as exc:
            raise error(f"{path}: not a readable CSV file ({_first_line(exc)})") from None
        header = str(df.columns[0]) if len(df.columns) == 1 else ""
        sep = next((s for s in (";", "\t", "|") if s in header), None)
        if sep is not None:
            raise error(
                f"{path}: the header {header!r} reads as one column: the file seems to be "
                f"separated by {sep!r}; expected a comma-separated file"
            )
    names = [str(c).strip() for c in df.columns]
    for i, name in enumerate(names):
        if not name:
            raise error(f"{path}: column {i} has no name in the header; expected a name")
        if name in names[:i]:
            raise error(
                f"{path}: column {name!r} is given twice in the header (spaces aside); "
                "expected each column once"
            )
    df.columns = names
    return df


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def show_cell(value: object) -> str:
    """A table's cell as a user would write it: ``(empty)``, a number, or 'text'."""
    if value is None or (isinstance(value, (float, np.floating)) and np.isnan(value)):
        return "(empty)"
    if isinstance(value, str):
        try:
            float(value)
            return value
        except ValueError:
            return repr(value)
    if isinstance(value, (float, np.floating, int, np.integer)):
        short = f"{float(value):g}"
        return short if float(short) == float(value) else repr(float(value))
    return str(value)


def _read_trace_table(path: Path, tag: str | None = None) -> pd.DataFrame:
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    name = path.name
    if name.endswith((".parquet", ".pq", ".csv", ".csv.gz")):
        return read_table(path)
    if path.is_dir() and not any("tfevents" in p.name for p in path.iterdir()):
        raise TraceError(
            f"{path}: a directory without TensorBoard event files (*tfevents*); expected a "
            "trace file (.parquet, .csv) or a TensorBoard run directory"
        )
    if "tfevents" in name or path.is_dir():
        return read_tensorboard(path, tag)
    raise TraceError(
        f"{path}: unknown trace file type; expected .parquet, .csv, .csv.gz or a "
        "TensorBoard event file/directory"
    )


def read_tensorboard(path: Path, tag: str | None) -> pd.DataFrame:
    """Read one scalar tag from TensorBoard event file(s) as a single trace."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    try:
        acc.Reload()
    except Exception as exc:
        raise TraceError(f"{path}: not a readable TensorBoard event file ({exc})") from exc
    tags = acc.Tags().get("scalars", [])
    if not tags:
        raise TraceError(f"{path}: no scalar tags in TensorBoard events")
    if tag is None:
        if len(tags) > 1:
            raise TraceError(f"{path}: several scalar tags {sorted(tags)}; pick one with --tag")
        tag = tags[0]
    if tag not in tags:
        raise TraceError(f"{path}: no scalar tag {tag!r}; available: {sorted(tags)}")
    events = acc.Scalars(tag)
    stem = path.name if path.is_dir() else path.parent.name or path.name
    return pd.DataFrame(
        {
            "trace_id": f"tb:{stem}:{tag}",
            "family": "imported",
            "source": f"tensorboard:{stem}:{tag}",
            "step": [float(e.step) for e in events],
            "loss": [float(e.value) for e in events],
        }
    )


def validate_traces(df: pd.DataFrame, origin: str = "<table>", extra: bool = False) -> pd.DataFrame:
    """Check a long-form trace table and return it normalised (typed, with ``split``;
    ``extra``: with the table's other columns after those).

    Raises :class:`TraceError` naming ``origin``, the trace and the row (0-based data
    row in the table) for: a missing column, NaN/inf, a negative loss or step, a step that
    does not increase within a trace, a trace with fewer than ``MIN_POINTS`` points, or an
    unknown split name.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(
            f"{origin}: missing column(s) {missing}; expected columns {list(REQUIRED_COLUMNS)}"
        )
    if len(df) == 0:
        raise TraceError(f"{origin}: the table has no rows")
    out = df.reset_index(drop=True).copy()
    for col in ("trace_id", "family", "source"):
        if out[col].isna().any():
            row = int(np.flatnonzero(out[col].isna().to_numpy())[0])
            raise TraceError(f"{origin}: row {row}: column {col!r} is empty")
        out[col] = out[col].astype(str)
    for col in ("step", "loss"):
        values = pd.to_numeric(out[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TraceError(
                f"{origin}: trace {out.at[row, 'trace_id']!r}, row {row}: {col} is "
                f"{show_cell(df[col].iloc[row])}; expected a finite number"
            )
        out[col] = values
    for col, what in (("loss", "losses"), ("step", "steps (cumulative work)")):
        negative = out[col].to_numpy() < 0
        if negative.any():
            row = int(np.flatnonzero(negative)[0])
            raise TraceError(
                f"{origin}: trace {out.at[row, 'trace_id']!r}, row {row}: {col} "
                f"{show_cell(df[col].iloc[row])} is negative; {what} must be >= 0"
            )
    ids = out["trace_id"].to_numpy()
    steps = out["step"].to_numpy()
    same_as_prev = np.r_[False, ids[1:] == ids[:-1]]
    not_increasing = same_as_prev & np.r_[False, steps[1:] <= steps[:-1]]
    if not_increasing.any():
        row = int(np.flatnonzero(not_increasing)[0])
        raise TraceError(
            f"{origin}: trace {ids[row]!r}, row {row}: step {steps[row]:g} does not "
            f"increase (previous step {steps[row - 1]:g}); steps must be strictly "
            "increasing within a trace and a trace's rows contiguous"
        )
    starts = np.flatnonzero(~same_as_prev)
    if len(np.unique(ids[starts])) != len(starts):
        dup = pd.Series(ids[starts]).duplicated()
        row = int(starts[int(np.flatnonzero(dup.to_numpy())[0])])
        raise TraceError(
            f"{origin}: trace {ids[row]!r}, row {row}: the trace's rows are not contiguous "
            "(it appears again after another trace)"
        )
    lengths = np.diff(np.r_[starts, len(out)])
    short = lengths < MIN_POINTS
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise TraceError(
            f"{origin}: trace {ids[starts[i]]!r}, row {int(starts[i])}: has {lengths[i]} "
            f"point(s); a trace needs at least {MIN_POINTS}"
        )
    for col in ("family", "source"):
        per_trace = out.groupby("trace_id", sort=False)[col].nunique()
        if (per_trace > 1).any():
            tid = per_trace.index[int(np.flatnonzero(per_trace.to_numpy() > 1)[0])]
            row = int(np.flatnonzero(ids == tid)[0])
            raise TraceError(f"{origin}: trace {tid!r}, row {row}: {col} changes within the trace")
    if "split" in out.columns:
        bad_split = ~out["split"].isin(SPLITS)
        if bad_split.any():
            row = int(np.flatnonzero(bad_split.to_numpy())[0])
            raise TraceError(
                f"{origin}: trace {ids[row]!r}, row {row}: split {out.at[row, 'split']!r} "
                f"is not one of {list(SPLITS)}"
            )
    else:
        out["split"] = out["source"].map(hash_split)
    columns = [*REQUIRED_COLUMNS, "split"]
    return out[columns + [c for c in out.columns if extra and c not in columns]]


def hash_split(source: str, val: float = 0.15, test: float = 0.15) -> str:
    """Stable split of a source name: the same source always lands in the same split."""
    u = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if u < test else "val" if u < test + val else "train"


def read_traces(
    path: str | os.PathLike, tag: str | None = None, extra: bool = False
) -> pd.DataFrame:
    """Read and validate a trace file (Parquet, CSV or TensorBoard events); ``extra``:
    keep its columns beyond a library's."""
    path = Path(path)
    return validate_traces(_read_trace_table(path, tag), origin=str(path), extra=extra)


def write_traces(df: pd.DataFrame, path: str | os.PathLike, extra: bool = False) -> None:
    """Validate then write a library atomically (``extra``: with the table's columns
    beyond a library's): no half-written file is ever left."""
    path = Path(path)
    df = validate_traces(df, origin=str(path), extra=extra)
    with atomic_path(path) as tmp:
        try:
            if path.suffix == ".csv":
                df.to_csv(tmp, index=False)
            else:
                df.to_parquet(tmp, index=False, compression="zstd")
        except (ValueError, TypeError, ImportError) as exc:  # pyarrow's errors are these
            raise TraceError(f"{path}: cannot be written ({_first_line(exc)})") from None


LIBRARY_SUFFIXES = (".parquet", ".pq", ".csv")


def flat_trace_starts(df: pd.DataFrame) -> np.ndarray:
    """First row of each trace whose loss never falls below its first value (rows of a
    trace contiguous): a flat, all-zero or rising curve."""
    loss = np.maximum(df["loss"].to_numpy(np.float64), LOSS_FLOOR)
    ids = df["trace_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return starts[np.minimum.reduceat(loss, starts) >= loss[starts]]


def reject_flat(df: pd.DataFrame, origin: str) -> None:
    """Raise :class:`TraceError` for a trace whose loss never falls below its first value.

    On such a curve (constant, all zero, rising) a task would meet any target the
    workload draws at its first report, and no predictor has remaining work to predict.
    """
    flat = flat_trace_starts(df)
    if len(flat):
        row = int(flat[0])
        raise TraceError(
            f"{origin}: trace {df['trace_id'].iloc[row]!r}, row {row}: the loss never falls "
            f"below its first value {df['loss'].iloc[row]:g} (a flat or rising curve); "
            "expected a learning curve whose loss decreases (is this the loss column or tag?)"
        )


def import_traces(
    sources: list[str | os.PathLike], out: str | os.PathLike, tag: str | None = None
) -> pd.DataFrame:
    """Validate user files and merge them into library ``out`` (created if absent),
    keeping every column the library and the files hold.

    Besides :func:`validate_traces`, each imported trace must be a learning curve
    (:func:`reject_flat`); ``out`` must be a ``.parquet``/``.pq``/``.csv`` file path.
    """
    out = Path(out)
    if out.is_dir():
        raise TraceError(
            f"{out}: is a directory; expected the library file to create or extend "
            f"({', '.join(LIBRARY_SUFFIXES)})"
        )
    if out.suffix not in LIBRARY_SUFFIXES:
        raise TraceError(
            f"{out}: unknown library file type; expected a {', '.join(LIBRARY_SUFFIXES)} file"
        )
    frames = [read_traces(out, extra=True)] if out.exists() else []
    # trace id -> why a second trace of that id is refused
    taken = {tid: f"is already in the library {out}" for f in frames for tid in f["trace_id"]}
    for p in sources:
        frames.append(read_traces(p, tag, extra=True))
        reject_flat(frames[-1], str(p))
        for tid in frames[-1]["trace_id"].unique():
            if tid in taken:
                raise TraceError(f"{p}: trace id {tid!r} {taken[tid]}; ids must be unique")
            taken[tid] = f"occurs in more than one input (also in {p})"
    merged = pd.concat(frames, ignore_index=True)
    write_traces(merged, out, extra=True)
    return merged


@dataclass(frozen=True)
class TraceSet:
    """Traces as flat numpy arrays (fast lookups for the simulator and predictors).

    Trace ``i`` occupies ``steps[offsets[i]:offsets[i+1]]`` and the same slice of
    ``loss`` and ``smooth``.  ``smooth`` is the running minimum of a centred moving
    average of log-loss: the monotone envelope from which targets are drawn.
    """

    ids: np.ndarray
    families: np.ndarray
    sources: np.ndarray
    splits: np.ndarray
    offsets: np.ndarray
    steps: np.ndarray
    loss: np.ndarray
    smooth: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, window: int = 5) -> TraceSet:
        """Build from a validated long-form table, keeping its row order."""
        ids = df["trace_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        offsets = np.r_[starts, len(df)].astype(np.int64)
        loss = df["loss"].to_numpy(np.float64)
        smooth = np.empty_like(loss)
        for a, b in zip(offsets[:-1], offsets[1:]):
            smooth[a:b] = smooth_curve(loss[a:b], window)
        return cls(
            ids=ids[starts],
            families=df["family"].to_numpy()[starts],
            sources=df["source"].to_numpy()[starts],
            splits=df["split"].to_numpy()[starts],
            offsets=offsets,
            steps=df["step"].to_numpy(np.float64),
            loss=loss,
            smooth=smooth,
        )

    def trace(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps, loss) of trace ``i``."""
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.steps[a:b], self.loss[a:b]

    def smoothed(self, i: int) -> np.ndarray:
        """Monotone smoothed loss of trace ``i``."""
        return self.smooth[self.offsets[i] : self.offsets[i + 1]]

    def subset(self, mask: np.ndarray) -> TraceSet:
        """The traces where ``mask`` is true."""
        keep = np.flatnonzero(mask)
        pieces = [np.arange(self.offsets[i], self.offsets[i + 1]) for i in keep]
        rows = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        lengths = np.diff(self.offsets)[keep]
        return TraceSet(
            ids=self.ids[keep],
            families=self.families[keep],
            sources=self.sources[keep],
            splits=self.splits[keep],
            offsets=np.r_[0, np.cumsum(lengths)].astype(np.int64),
            steps=self.steps[rows],
            loss=self.loss[rows],
            smooth=self.smooth[rows],
        )


def smooth_curve(loss: np.ndarray, window: int = 5) -> np.ndarray:
    """Running minimum of a centred moving average of log-loss, back in loss units."""
    log = np.log(np.maximum(loss, LOSS_FLOOR))
    k = max(1, min(window, len(log)))
    padded = np.pad(log, (k // 2, k - 1 - k // 2), mode="edge")
    avg = np.convolve(padded, np.ones(k) / k, mode="valid")
    smooth = np.exp(np.minimum.accumulate(avg))
    # A window's mean is never below its smallest point, so some raw point up to the
    # window's right edge is <= smooth[j]; rounding in log/exp can break that by an ulp on
    # a plateau of equal values, so clamp to it: every target drawn from here is reachable.
    right = np.minimum(np.arange(len(log)) + (k - 1 - k // 2), len(log) - 1)
    reached = np.minimum.accumulate(np.maximum(loss, LOSS_FLOOR))[right]
    return np.maximum(smooth, reached)


def load_traces(
    path: str | os.PathLike | None = None,
    split: str | None = None,
    families: list[str] | None = None,
) -> TraceSet:
    """Load a trace library (default: the shipped one), optionally one split/families."""
    df = read_traces(path or SHIPPED_LIBRARY)
    if split is not None:
        if split not in (*SPLITS, "all"):
            raise TraceError(f"unknown split {split!r}; expected one of {[*SPLITS, 'all']}")
        if split != "all":
            df = df[df["split"] == split]
    if families:
        known = sorted(df["family"].unique())
        unknown = [f for f in families if f not in known]
        if unknown:
            raise TraceError(f"unknown trace family {unknown}; the library has {known}")
        df = df[df["family"].isin(families)]
    if len(df) == 0:
        raise TraceError(f"{path or SHIPPED_LIBRARY}: no traces left for split={split!r}")
    return TraceSet.from_frame(df.reset_index(drop=True))
