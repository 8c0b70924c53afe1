"""Ctrl-C at any moment of ``mara evaluate --workers 2``, start-up included: one line, no
traceback from the parent or a worker, no temporary file, and what was saved is whole."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from mara_agents.evaluation.runner import PARTIAL

CODE = "import sys; from mara_agents.cli import main; sys.exit(main(sys.argv[1:]))"
ARGV = ["evaluate", "--schedulers", "uniform,edf", "--loads", "1.0", "--episodes", "5000"]
ARGV += ["--workers", "2", "--horizon", "10", "--no-progress"]


def _forkserver_started(pid: int) -> bool:
    """Whether process ``pid`` has started the server its workers fork from."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
        return any(b"forkserver" in Path(f"/proc/{c}/cmdline").read_bytes() for c in children)
    except OSError:  # gone, or a system without /proc: the time since --out is claimed
        return False


def test_ctrl_c_while_workers_start_stops_in_one_line(tmp_path):
    rng = random.Random(1)
    # from the start of the worker server: its imports, then the workers' own start
    delays = [rng.uniform(0.0, 0.15) for _ in range(4)]
    stopped = 0
    for i, delay in enumerate(delays):
        out = tmp_path / str(i)
        proc = subprocess.Popen(
            [sys.executable, "-c", CODE, *ARGV, "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the whole group
        )
        deadline = time.monotonic() + 60
        while not (out / ".mara-run").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        claimed = time.monotonic()
        while not _forkserver_started(proc.pid) and time.monotonic() < claimed + 0.5:
            time.sleep(0.002)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, (delay, err)
        if proc.returncode == 0:  # it fell in the ~10 ms the worker server spawns ignoring it
            continue
        stopped += 1
        assert proc.returncode == 130, err
        assert err.strip().splitlines() == [
            "mara evaluate: interrupted; rerun with --resume to continue, or --force to start again"
        ], (delay, err)
        left = sorted(p.name for p in out.iterdir()) if out.exists() else []
        assert set(left) <= {".mara-run", PARTIAL}, left
        if PARTIAL in left:
            assert len(pd.read_csv(out / PARTIAL)) > 0
    assert stopped >= len(delays) - 1


def _sigint_handler() -> str:
    return repr(signal.getsignal(signal.SIGINT))


def test_the_workers_and_their_server_ignore_ctrl_c_which_the_parent_handles():
    """A terminal's Ctrl-C reaches every process of the group: the workers ignore it from
    their start (a worker interrupted while it unpickles prints a traceback), the parent
    stops them."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import forkserver

    from mara_agents.evaluation.runner import _pool_context

    # the parent's handler as a command starts (a test run before in this process, Ray
    # Tune's included, may have left its own)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ProcessPoolExecutor(1, mp_context=_pool_context()) as pool:
            assert pool.submit(_sigint_handler).result() == repr(signal.SIG_IGN)
        server = forkserver._forkserver._forkserver_pid
        ignored = Path(f"/proc/{server}/status").read_text().split("SigIgn:")[1].split()[0]
        assert int(ignored, 16) & (1 << (signal.SIGINT - 1))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the parent's
    finally:
        signal.signal(signal.SIGINT, previous)
