"""Shared fixtures: small environment configs on the shipped trace library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# MARA_TEST_TRACES lets a developer point the suite at another library; CI uses the
# shipped one.
TRACES = os.environ.get("MARA_TEST_TRACES") or None
SMALL = {
    "num_nodes": 5,
    "num_slots": 4,
    "horizon": 25,
    "traces": TRACES,
    "split": os.environ.get("MARA_TEST_SPLIT", "train"),
}


ROOT = Path(__file__).resolve().parents[1]


def run_script(path: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run a script of ``examples/`` or ``benchmarks/`` (relative to the repository) as a
    user does, in its own interpreter: tests read what it prints and writes, never its
    internals."""
    return subprocess.run(
        [sys.executable, str(ROOT / path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def small_config() -> dict:
    return dict(SMALL)
