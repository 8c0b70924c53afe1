"""Shared fixtures: small environment configs on the shipped trace library, and the small
env with a policy's observation (predictions, then a plan) that the predictor and policy
tests share."""

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


# The predictor wrapper's tests: fewer slots than nodes, so tasks queue beyond the slots.
WRAPPED_SMALL = {"num_nodes": 4, "num_slots": 3, "horizon": 20}


def wrapped(predictor, **kw):
    """The env of ``WRAPPED_SMALL`` and ``kw`` with a policy's observation: the predictor
    wrapper's predictions by ``predictor``, then the default teacher's plan (flow_share)."""
    from flow_predictor.wrapper import PredictorFeatures
    from mara_agents.policy.features import FeatureSettings
    from mara_env.cluster_env import env

    settings = FeatureSettings()
    return PredictorFeatures(
        env(**{**WRAPPED_SMALL, **kw}), predictor, settings.prediction(), settings.plan
    )


def play_until_reports(e, reports: int = 3, seed: int = 0) -> None:
    """Random valid actions in ``e`` (reset) until a visible task has ``reports`` loss reports."""
    import numpy as np

    rng = np.random.default_rng(seed)
    engine = e.unwrapped.engine
    for _ in range(200 * len(e.possible_agents)):
        tasks = engine.slot_tasks[engine.slot_tasks >= 0]
        if any(len(engine.sim.hist_work[k]) >= reports for k in tasks):
            return
        obs, _, term, trunc, _ = e.last()
        assert not (term or trunc)
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    raise AssertionError("no task reported enough losses")


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
