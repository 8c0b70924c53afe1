"""Soak: many episodes through the predictor wrapper must not grow resident memory."""

from __future__ import annotations

import gc
import os

import numpy as np
import pettingzoo
import pytest
import torch

import mara_env
from flow_predictor.wrapper import PredictorFeatures

EPISODES = 1_000
WARM_UP = 50
MAX_GROWTH = 0.05
CONFIG = {"num_nodes": 4, "num_slots": 3, "horizon": 15}


def resident_bytes() -> int:
    """Resident set size of this process (psutil if installed, else Linux's /proc)."""
    try:
        import psutil
    except ImportError:
        if not os.path.exists("/proc/self/statm"):
            pytest.skip("needs psutil or /proc/self/statm to read resident memory")
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return psutil.Process().memory_info().rss


def play(env: PredictorFeatures, seed: int, rng: np.random.Generator) -> None:
    """One episode of uniformly random valid actions."""
    env.reset(seed=seed)
    for _ in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))


@pytest.mark.slow
def test_resident_memory_is_flat_over_many_wrapped_episodes():
    torch.set_num_threads(1)
    env = PredictorFeatures(pettingzoo.make("aec", mara_env.ENV_ID, **CONFIG))
    rng = np.random.default_rng(0)
    for seed in range(WARM_UP):
        play(env, seed, rng)
    gc.collect()
    after_warm_up = resident_bytes()
    for seed in range(WARM_UP, EPISODES):
        play(env, seed, rng)
    gc.collect()
    at_end = resident_bytes()
    growth = at_end / after_warm_up - 1
    print(f"RSS {after_warm_up / 2**20:.1f} -> {at_end / 2**20:.1f} MiB ({growth:+.2%})")
    assert growth <= MAX_GROWTH, (
        f"resident memory grew {growth:.1%} over {EPISODES - WARM_UP} episodes "
        f"({after_warm_up / 2**20:.1f} MiB -> {at_end / 2**20:.1f} MiB)"
    )
