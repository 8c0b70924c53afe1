"""Run collectors into a trace library file: deterministic configs, resumable, atomic writes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from mara_env.traces import REQUIRED_COLUMNS, flat_trace_starts, read_traces, write_traces
from mara_traces import lm, rl, tabular, vision
from mara_traces.common import source_name
from mara_traces.splits import split_of

FAMILIES = {"tabular": tabular, "vision": vision, "rl": rl, "lm": lm}
# The shipped library (v2): (family, config stream, traces).  The v1 streams are the first
# library's draws, unchanged; the v2 streams add the schedules, optimisers, environments and
# held-out sources of library v2; lm is new.
LIBRARY_RECIPE: tuple[tuple[str, str, int], ...] = (
    ("tabular", "v1", 220),
    ("vision", "v1", 220),
    ("rl", "v1", 220),
    ("rl", "v2", 150),
    ("lm", "v1", 320),
    ("tabular", "v2", 120),
    ("vision", "v2", 120),
)
CHUNK = 10  # traces between writes: a kill loses at most this many runs


def streams(family: str) -> list[str]:
    """The config streams of ``family``: ``v1`` (the shipped draws) first, then extensions."""
    return list(getattr(FAMILIES[family], "STREAMS", {"v1": None}))


def draw_configs(
    family: str, n: int, seed: int, budget: float = 1.0, stream: str = "v1"
) -> list[tuple[str, dict]]:
    """The first ``n`` (trace_id, config) pairs of ``family``'s ``stream`` for ``seed``.

    Config ``i`` depends only on (family, stream, seed, i), so a larger ``n`` extends a
    smaller one.  Stream ``v1`` (ids ``<family>-s<seed>-<i>``) is the shipped library's and
    never changes; an extension stream (ids ``<family>-<stream>-s<seed>-<i>``) draws from
    its own random stream, so adding one leaves every existing config as it was.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown trace family {family!r}; expected one of {list(FAMILIES)}")
    known = streams(family)
    if stream not in known:
        raise ValueError(
            f"unknown config stream {stream!r} for {family!r}; expected one of {known}"
        )
    code = list(FAMILIES).index(family)
    module = FAMILIES[family]
    if stream == "v1":
        return [
            (
                f"{family}-s{seed}-{i:06d}",
                module.sample_config(np.random.default_rng([seed, code, i]), budget),
            )
            for i in range(n)
        ]
    extra = known.index(stream)
    return [
        (
            f"{family}-{stream}-s{seed}-{i:06d}",
            module.sample_config(np.random.default_rng([seed, code, i, extra]), budget, stream),
        )
        for i in range(n)
    ]


def run_config(family: str, trace_id: str, cfg: dict) -> pd.DataFrame:
    """Run one config and return its trace as long-form rows (with ``split``)."""
    steps, loss = FAMILIES[family].run(cfg)
    source = source_name(cfg)
    return pd.DataFrame(
        {
            "trace_id": trace_id,
            "family": family,
            "source": source,
            "step": steps,
            "loss": loss,
            "split": split_of(source),
        }
    )


def _run_item(item: tuple[str, str, dict]) -> pd.DataFrame:
    return run_config(*item)


def _single_thread() -> None:
    torch.set_num_threads(1)


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    # In-process runs use one thread like the workers do, without leaking the setting.
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def collect(
    family: str,
    n: int,
    out: Path,
    seed: int = 0,
    workers: int = 1,
    progress: bool = True,
    budget: float = 1.0,
    stream: str = "v1",
) -> pd.DataFrame:
    """Collect ``n`` traces of ``family`` into Parquet ``out``, resuming what is already there.

    Trace ids already in ``out`` are skipped; new traces are appended after the existing
    rows (which stay as they are) and the file is rewritten atomically every :data:`CHUNK`
    traces.  ``budget`` < 1 shortens runs (tests); ``stream`` picks the config stream
    (:func:`draw_configs`).  Returns the whole library in ``out``.
    """
    out = Path(out)
    table = read_traces(out) if out.exists() else pd.DataFrame(columns=[*REQUIRED_COLUMNS, "split"])
    done = set(table["trace_id"].unique())
    todo = [
        (family, tid, cfg)
        for tid, cfg in draw_configs(family, n, seed, budget, stream)
        if tid not in done
    ]
    frames, pending = [table], []
    label = family if stream == "v1" else f"{family}-{stream}"
    bar = tqdm(total=len(todo), desc=f"collect {label}", disable=not progress)
    pool = ProcessPoolExecutor(workers, initializer=_single_thread) if workers > 1 else None
    try:
        with _torch_threads(1):
            results = pool.map(_run_item, todo) if pool else map(_run_item, todo)
            for frame in results:
                pending.append(frame)
                bar.update()
                if len(pending) >= CHUNK:
                    frames, pending = [_flush(frames + pending, out)], []
    finally:
        bar.close()
        if pool:
            pool.shutdown(cancel_futures=True)
    if pending:
        frames = [_flush(frames + pending, out)]
    return frames[0]


def _flush(frames: list[pd.DataFrame], out: Path) -> pd.DataFrame:
    table = pd.concat([f for f in frames if len(f)], ignore_index=True)
    write_traces(table, out)
    return table


def build_library(
    out: Path,
    recipe: tuple[tuple[str, str, int], ...] = LIBRARY_RECIPE,
    seed: int = 0,
    workers: int = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """Collect every (family, stream, n) of ``recipe`` into ``out``, resuming what is there.

    Splits are recomputed from the sources at the end (:func:`split_of`), so a library
    collected under earlier split rules is re-split, never re-run.
    """
    for family, stream, n in recipe:
        collect(family, n, out, seed=seed, workers=workers, progress=progress, stream=stream)
    table = read_traces(out)
    table["split"] = table["source"].map(split_of)
    write_traces(table, out)
    return table


def learning_traces(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The traces whose loss falls below its first value, and the ids of those dropped.

    A run that never learns (an RL agent that never reaches a goal) is a real outcome, but
    as a task it meets any target at its first report; the shipped library leaves it out,
    as ``mara traces import`` does (:func:`mara_env.traces.reject_flat`).
    """
    table = table.reset_index(drop=True)
    dropped = sorted(table["trace_id"].iloc[flat_trace_starts(table)])
    keep = ~table["trace_id"].isin(dropped)
    return table[keep].reset_index(drop=True), dropped
