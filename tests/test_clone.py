"""Behaviour cloning's episode seeds: every stage (and every experiment seed) its own."""

from __future__ import annotations

from mara_agents.training.clone import demonstration_seeds


def test_cloning_stages_never_share_an_episode_seed():
    """The teacher's episodes and each DAgger round draw from their own SeedSequence
    stream; the old offsets (10_000 + seed, 20_000 + seed + 1_000 r) collided once a round
    had more than 1,000 episodes, and across experiment seeds."""
    seeds = [
        s for root in (0, 1) for stage in range(6) for s in demonstration_seeds(root, stage, 3000)
    ]
    assert len(set(seeds)) == len(seeds)
    assert all(isinstance(s, int) and s >= 0 for s in seeds)  # numpy and the env take them
