"""Shared fixtures: small environment configs on the shipped trace library."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

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


def load_script(path: Path) -> ModuleType:
    """Import a script of a folder that is not a package (``examples/``, ``benchmarks/``)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


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
