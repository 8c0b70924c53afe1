"""Ctrl-C at any moment of ``mara evaluate --workers 2``, start-up included: one line, no
traceback from the parent or a worker, no temporary file, and what was saved is whole."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pandas as pd

from mara_agents.evaluation.runner import PARTIAL

CODE = "import sys; from mara_agents.cli import main; sys.exit(main(sys.argv[1:]))"
ARGV = ["evaluate", "--schedulers", "uniform,edf", "--loads", "1.0", "--episodes", "5000"]
ARGV += ["--workers", "2", "--horizon", "10", "--no-progress"]


def test_ctrl_c_while_workers_start_stops_in_one_line(tmp_path):
    rng = random.Random(1)
    # from the claim of --out: the workers start ~0.1 s later
    delays = [rng.uniform(0.06, 0.2) for _ in range(4)]
    for i, delay in enumerate(delays):
        out = tmp_path / str(i)
        proc = subprocess.Popen(
            [sys.executable, "-c", CODE, *ARGV, "--out", str(out)],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the whole group
        )
        deadline = time.monotonic() + 60
        while not (out / ".mara-run").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert err.strip().splitlines() == [
            "mara evaluate: interrupted; rerun with --resume to continue, or --force to start again"
        ], (delay, err)
        left = sorted(p.name for p in out.iterdir()) if out.exists() else []
        assert set(left) <= {".mara-run", PARTIAL}, left
        if PARTIAL in left:
            assert len(pd.read_csv(out / PARTIAL)) > 0
