"""The journal of a live run: every decision and report, so a killed driver can resume.

``DIR/journal.jsonl`` holds one JSON object per line: first a ``start`` record (the run's
settings and each job's probe), then one ``tick`` record per tick (the assignment, each
job's report and the checkpoint it left).  A checkpoint is written, atomically, before
the line that names it, and a line is flushed and synced before the next tick starts, so
after a crash the journal names only checkpoints that exist; a half-written last line is
ignored.  Checkpoints are plain ``torch.save`` files that workers read back with
``weights_only=True``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mara_env.atomic import atomic_write

JOURNAL = "journal.jsonl"
CHECKPOINTS = "checkpoints"


class JournalError(ValueError):
    """A journal cannot be resumed: missing, corrupt, or from other settings."""


class Journal:
    """Append-only record of a live run in ``out``, with its checkpoint store."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = self.out / JOURNAL

    def exists(self) -> bool:
        return self.path.is_file()

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new journal (an existing one is an error: resume it or pick another DIR)."""
        if self.exists():
            raise JournalError(
                f"{self.path} exists: pass --resume to continue that run, or another --out"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        self._append({"kind": "start", **header})

    def read(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The start record and the complete tick records (a torn last line is dropped)."""
        if not self.exists():
            raise JournalError(f"{self.path}: no journal to resume (run without --resume first)")
        lines = self.path.read_text().splitlines()
        records = []
        for i, line in enumerate(lines):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:  # torn by a crash mid-write: that tick never happened
                    break
                raise JournalError(f"{self.path}: line {i + 1} is not valid JSON") from None
            if not isinstance(record, dict):
                raise JournalError(f"{self.path}: line {i + 1} is not a JSON object")
            records.append(record)
        if not records or records[0].get("kind") != "start":
            raise JournalError(f"{self.path}: does not begin with a start record")
        ticks = [r for r in records[1:] if r.get("kind") == "tick"]
        for i, r in enumerate(ticks):
            if r.get("t") != i:
                raise JournalError(f"{self.path}: tick records out of order at tick {i}")
        if len(lines) != len(records):  # drop the torn line so appends start clean
            atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in records).encode())
        return records[0], ticks

    def tick(self, record: dict[str, Any]) -> None:
        """Append one tick's record (its checkpoints must already be saved)."""
        self._append({"kind": "tick", **record})

    def _append(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # ---- checkpoints --------------------------------------------------------------
    def save_checkpoint(self, job: str, t: int, blob: bytes) -> str:
        """Store job ``job``'s checkpoint after tick ``t``; returns its path within ``out``."""
        rel = f"{CHECKPOINTS}/{job}/t{t:06d}.pt"
        atomic_write(self.out / rel, blob)
        return rel

    def load_checkpoint(self, rel: str) -> bytes:
        path = self.out / rel
        if not path.is_file():
            raise JournalError(f"{path}: checkpoint named in the journal is missing")
        return path.read_bytes()

    def prune(self, job: str, keep: str) -> None:
        """Remove the job's older checkpoints once ``keep`` is journalled."""
        folder = self.out / CHECKPOINTS / job
        for path in folder.glob("t*.pt"):
            if f"{CHECKPOINTS}/{job}/{path.name}" != keep:
                path.unlink(missing_ok=True)
