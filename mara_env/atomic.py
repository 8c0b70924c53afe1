"""Atomic file writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

# The signals that stop a command (Ctrl-C, SIGTERM): held back while a temporary file is
# made, and while a whole file is written.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Temporary files made and not yet renamed or removed: removed at exit whatever happens
# (an interrupt can land between any two steps of a ``finally``).
_PENDING: set[str] = set()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back until the block ends, then act on them as usual.

    Python runs signal handlers in the main thread only, so elsewhere there is nothing to
    hold back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, object]] = []
    previous = {}
    try:
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not None:  # None: set outside Python, kept
                previous[signum] = signal.signal(signum, lambda *got: caught.append(got))
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum, frame in caught[:1]:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) that replaces ``path`` when the block
    ends without an exception: a reader sees the old file or the whole new one, and the
    temporary file does not outlive the block (nor, whatever interrupts it, the process)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        with signals_deferred():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
            _PENDING.add(tmp)
            os.close(fd)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual file mode
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if tmp is not None:
            _discard(tmp)


def _discard(tmp: str) -> None:
    """Remove temporary file ``tmp`` if it is still there, and forget it."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    _PENDING.discard(tmp)


@atexit.register
def _discard_pending() -> None:
    for tmp in list(_PENDING):
        _discard(tmp)


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees a half-written file; an
    interrupt waits until it is written (a save made as a run stops is never lost)."""
    with signals_deferred(), atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
