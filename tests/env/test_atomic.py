"""Atomic writes under interrupts: whatever moment a Ctrl-C lands, a file is the old one
or the whole new one, a save made as the process stops is kept, and no temporary file
outlives its process."""

from __future__ import annotations

import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mara_env.atomic

# Loads mara_env/atomic.py by its path, so that a process starts in milliseconds and the
# interrupts land all over the writing loop, not in imports.
WRITER = """
import importlib.util, signal, sys
spec = importlib.util.spec_from_file_location("atomic", sys.argv[1])
atomic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atomic)
out = sys.argv[2]


def stop(signum, frame):  # SIGTERM stops as Ctrl-C does, as the mara command line has it
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, stop)
# Ctrl-C as a process started from a terminal has it: a test runner's worker may have
# left SIGINT ignored, and an ignored disposition is inherited
signal.signal(signal.SIGINT, signal.default_int_handler)
n = 0
try:
    print("ready", flush=True)
    while True:
        n += 1
        atomic.atomic_write(out + "/saved.txt", (f"{n}\\n" * 5000).encode())
        with atomic.atomic_path(out + "/other.txt") as tmp:
            tmp.write_text(f"{n}\\n" * 5000)
except KeyboardInterrupt:  # the save made as it stops, as the command line makes it
    with atomic.signals_deferred():
        print("saving", flush=True)
        atomic.atomic_write(out + "/final.txt", (f"{n}\\n" * 5000).encode())
    sys.exit(130)
"""


def _whole(path: Path) -> bool:
    lines = path.read_text().splitlines()
    return len(lines) == 5000 and len(set(lines)) == 1


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupts_at_random_moments_lose_nothing_saved_and_leave_no_temporary_file(
    tmp_path, stop
):
    rng = random.Random(int(stop))
    for i in range(16):
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
        proc.send_signal(stop)
        if i % 3 == 0:  # a second one while the last save is written
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            if not ready:
                proc.kill()
            assert ready and proc.stdout.readline() == "saving\n", f"{i}: no save begun"
            time.sleep(rng.uniform(0.0, 0.002))
            proc.send_signal(stop)
        proc.communicate(timeout=20)
        names = sorted(p.name for p in out.iterdir())
        assert set(names) <= {"saved.txt", "other.txt", "final.txt"}, names  # no temporary
        assert "final.txt" in names, (i, names)  # the save made as it stopped
        assert all(_whole(out / name) for name in names), i
