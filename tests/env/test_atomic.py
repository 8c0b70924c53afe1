"""Atomic writes under interrupts: whatever moment a Ctrl-C lands, a file is the old one
or the whole new one, a save made as the process stops is kept, and no temporary file
outlives its process."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import mara_env.atomic

# Loads mara_env/atomic.py by its path, so that a process starts in milliseconds and the
# interrupts land all over the writing loop, not in imports.
WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("atomic", sys.argv[1])
atomic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atomic)
out = sys.argv[2]
n = 0
print("ready", flush=True)
try:
    while True:
        n += 1
        atomic.atomic_write(out + "/saved.txt", (f"{n}\\n" * 5000).encode())
        with atomic.atomic_path(out + "/other.txt") as tmp:
            tmp.write_text(f"{n}\\n" * 5000)
except KeyboardInterrupt:
    atomic.atomic_write(out + "/final.txt", (f"{n}\\n" * 5000).encode())
    sys.exit(130)
"""


def _whole(path: Path) -> bool:
    lines = path.read_text().splitlines()
    return len(lines) == 5000 and len(set(lines)) == 1


def test_interrupts_at_random_moments_lose_nothing_saved_and_leave_no_temporary_file(tmp_path):
    rng = random.Random(0)
    for i in range(24):
        out = tmp_path / str(i)
        out.mkdir()
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, mara_env.atomic.__file__, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGINT)
        if i % 3 == 0:  # a second Ctrl-C while the last save is written
            time.sleep(rng.uniform(0.0, 0.002))
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
        names = sorted(p.name for p in out.iterdir())
        assert set(names) <= {"saved.txt", "other.txt", "final.txt"}, names  # no temporary
        assert "final.txt" in names, (i, names)  # the save made as it stopped
        assert all(_whole(out / name) for name in names), i
