"""The examples in ``examples/`` run end to end on a tiny budget, as a user runs them."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip(
    "sb3_contrib", reason="sb3-contrib is not installed (pip install -e '.[examples]')"
)

from tests.conftest import run_script  # noqa: E402


def test_sb3_example_checks_its_env_trains_and_reports_completion_rates():
    # seed 1: the evaluation seed holds tasks at this tiny horizon (rate is not nan).
    argv = "--timesteps 256 --nodes 4 --slots 3 --horizon 10 --eval-episodes 1 --seed 1"
    proc = run_script("examples/sb3_maskable_ppo.py", *argv.split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = re.search(r"trained (\d+) timesteps", proc.stdout)
    assert trained and int(trained.group(1)) >= 256
    rates = re.search(
        r"mean completion rate  MaskablePPO (\S+)  EDF (\S+)  random (\S+)", proc.stdout
    )
    assert rates, proc.stdout
    ppo, edf, _ = (float(x) for x in rates.groups())
    assert 0.0 <= ppo <= 1.0 and not math.isnan(edf)
