"""The processes of a private Ray, recorded so that a killed driver leaves no orphans.

A driver that starts its own Ray records its own pid and the pid and start time of every
process it started (Ray's GCS, raylet, agents and workers) in a file of :func:`records`
(``~/.cache/mara/live-ray/``, or under ``$XDG_CACHE_HOME``), and removes the file when it
shuts its Ray down.  If that driver is killed, those processes may outlive it: the next
``mara live`` of the same user (``--resume`` or a new run, into any folder) first ends
every recorded process whose driver is gone.  A pid is matched with its start time, so a
pid the system has since given to another process is never touched.

Linux only (it reads ``/proc``); elsewhere nothing is recorded and nothing is ended.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from mara_env.atomic import atomic_write

PROC = Path("/proc")


def records() -> Path:
    """The folder of the records of this user's drivers."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "mara" / "live-ray"


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a running process, or None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (command) "
    if fields[0] == "Z":  # a zombie has ended; only its parent's wait is missing
        return None
    return int(fields[1]), int(fields[19])


def descendants(pid: int) -> list[int]:
    """Every running process below ``pid`` (children, their children, ...)."""
    parent = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parent[int(entry.name)] = st[0]
    found, frontier = [], {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        found += sorted(frontier)
    return found


def _mine() -> Path:
    me = os.getpid()
    st = _stat(me)
    return records() / f"{me}-{st[1] if st else 0}.json"


def record() -> None:
    """Record this driver and every process below it (call once its Ray has started)."""
    if not PROC.is_dir():
        return
    me = os.getpid()
    procs = [[pid, st[1]] for pid in descendants(me) if (st := _stat(pid)) is not None]
    atomic_write(_mine(), json.dumps({"processes": procs}).encode())


def forget() -> None:
    """Remove this driver's record (its Ray is shut down)."""
    _mine().unlink(missing_ok=True)


def reap(wait_s: float = 5.0) -> list[int]:
    """End the recorded processes of every driver that is gone; returns the pids ended."""
    folder = records()
    if not folder.is_dir() or not PROC.is_dir():
        return []
    ended = []
    for path in sorted(folder.glob("*-*.json")):
        pid, _, start = path.stem.partition("-")
        driver = _stat(int(pid)) if pid.isdigit() else None
        if driver is not None and str(driver[1]) == start:
            continue  # its driver still runs: not orphans
        try:
            procs = json.loads(path.read_text())["processes"]
        except (OSError, ValueError, KeyError, TypeError):
            procs = []  # unreadable: nothing can be matched safely
        for p, started in procs:
            st = _stat(int(p))
            if st is not None and st[1] == started:
                try:
                    os.kill(int(p), signal.SIGKILL)
                    ended.append(int(p))
                except OSError:
                    pass
        path.unlink(missing_ok=True)
    deadline = time.monotonic() + wait_s
    while any(_stat(p) is not None for p in ended) and time.monotonic() < deadline:
        time.sleep(0.05)
    return ended
