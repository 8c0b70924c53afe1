"""The references a policy trained outside the harness is compared with, on the harness's
own episodes: the random *policy* through the env's API and every built-in scheduler.

A script that trains with another library (``examples/``) plays its policy on the seeds of
:func:`episode_seeds` and reports it next to :func:`reference_episodes` on the same seeds;
:func:`completion_summary` gives the mean completion rate of each with its 95% half-width,
and :func:`paired_leads` the learned policy's lead over the references, seed by seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import mara_env
from mara_agents.evaluation.runner import episode_seed
from mara_agents.evaluation.stats import mean_ci
from mara_env.cluster_env import play_random
from mara_env.schedulers import SCHEDULERS, run_episode

# Per-tick figures :func:`episode_figures` reports besides the completion rate.
PER_TICK = ("moves_per_tick", "idled_per_tick", "bumped_per_tick")


def env_kwargs(settings: Any, split: str) -> dict[str, Any]:
    """Keyword arguments of the registered env for one trace split, from a script's
    settings (``nodes``, ``slots``, ``load``, ``horizon``)."""
    return {
        "num_nodes": settings.nodes,
        "num_slots": settings.slots,
        "load": settings.load,
        "horizon": settings.horizon,
        "split": split,
    }


def episode_seeds(base_seed: int, load: float, episodes: int) -> list[int]:
    """The seeds of the first ``episodes`` episodes of ``mara evaluate --seeds base_seed``."""
    return [episode_seed(base_seed, load, i) for i in range(episodes)]


def episode_figures(metrics: dict[str, Any], idled: int = 0, bumped: int = 0) -> dict[str, float]:
    """What an evaluation reports of one episode, from the simulator's ``metrics()`` and the
    counts of choices that were idled (masked out, or lost a race) or bumped."""
    ticks = max(metrics["ticks"], 1)
    return {
        "completion": metrics["completion_rate"],
        "moves_per_tick": metrics["reassignments"] / ticks,
        "idled_per_tick": idled / ticks,
        "bumped_per_tick": bumped / ticks,
    }


def reference_episodes(
    env_kwargs: Mapping[str, Any], seeds: Sequence[int]
) -> dict[str, list[dict[str, float]]]:
    """:func:`episode_figures` of the random policy (``play_random`` through the AEC env
    built from ``env_kwargs``) and of every scheduler of ``mara_env.schedulers``, per seed."""
    aec = mara_env.env(**env_kwargs)
    episodes: dict[str, list[dict[str, float]]] = {"random_policy": []}
    for s in seeds:
        play_random(aec, s)
        episodes["random_policy"].append(episode_figures(aec.unwrapped.engine.sim.metrics()))
    engine = aec.unwrapped.engine
    for name, scheduler in SCHEDULERS.items():
        episodes[name] = [
            episode_figures(run_episode(scheduler(), engine.config, engine.traces, s))
            for s in seeds
        ]
    return episodes


def mean_of(episodes: Sequence[Mapping[str, float]], key: str = "completion") -> float:
    """Mean of ``key`` over the episodes that have it finite (nan when none has)."""
    values = np.array([e[key] for e in episodes], float)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def completion_summary(episodes: Mapping[str, Sequence[Mapping[str, float]]]) -> dict[str, float]:
    """Per policy ``name``: ``name`` (mean completion rate), ``name_ci95`` (half-width of
    its 95% t-interval) and ``name_<figure>`` for each per-tick figure."""
    result: dict[str, float] = {}
    for name, figures in episodes.items():
        mean, half = mean_ci(np.array([e["completion"] for e in figures]))
        result[name], result[f"{name}_ci95"] = mean, half
        for key in PER_TICK:
            result[f"{name}_{key}"] = mean_of(figures, key)
    return result


PAIRED_AGAINST = ("random", "edf", "uniform")  # the references a learned policy is paired with


def paired_leads(
    episodes: Mapping[str, Sequence[Mapping[str, float]]],
    learned: str,
    against: Sequence[str] = PAIRED_AGAINST,
) -> dict[str, float]:
    """Completion of ``learned`` minus each policy of ``against``, paired episode by episode
    (the lists share their seeds): ``<learned>_minus_<name>`` and its 95% half-width
    ``<learned>_minus_<name>_ci95``."""
    mine = np.array([e["completion"] for e in episodes[learned]])
    result: dict[str, float] = {}
    for name in against:
        other = np.array([e["completion"] for e in episodes[name]])
        if len(other) != len(mine):
            raise ValueError(f"{learned!r} has {len(mine)} episodes and {name!r} {len(other)}")
        key = f"{learned}_minus_{name}"
        result[key], result[f"{key}_ci95"] = mean_ci(mine - other)
    return result


def lead_lines(result: Mapping[str, float], learned: str) -> list[str]:
    """Printable lines of :func:`paired_leads`' figures in ``result``, one per reference."""
    lines = []
    for name in PAIRED_AGAINST:
        key = f"{learned}_minus_{name}"
        lines.append(
            f"  {learned} - {name:<9} {result[key]:>+7.3f} ± {result[f'{key}_ci95']:.3f} (paired)"
        )
    return lines
