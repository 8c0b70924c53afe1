"""Predictor and wrapped-environment throughput (prints figures; not a timed assertion).

How to run::

    python benchmarks/predictor_speed.py [--checkpoint CKPT] [--seconds 5] [--clock cpu]
    python benchmarks/predictor_speed.py --seconds 8 --rounds 8 --clock cpu --episodes 30

Results to expect (2-core CPU, one torch thread): see docs/predictor.md.  On a shared
machine ``--clock cpu`` (this process's CPU time instead of wall time) is much steadier.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import torch

from flow_predictor.checkpoint import load_predictor
from flow_predictor.remaining import (
    FLOW_SAMPLES,
    MIN_REPORTS,
    FittedPrefixes,
    RemainingWork,
    RemainingWorkPredictor,
    current_work,
)
from flow_predictor.wls import WLSPredictor
from flow_predictor.wrapper import PredictionSettings, PredictorFeatures
from mara_env.cluster_env import env
from mara_env.traces import load_traces


def predictions_per_second(predictor, batch: int, seconds: float, clock=time.perf_counter) -> float:
    """Remaining-work predictions per second (of ``clock``) for batches of ``batch`` tasks."""
    traces = load_traces(split="train")
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(traces), batch)
    works, losses = [], []
    for i in idx:
        s, loss = traces.trace(int(i))
        n = int(rng.integers(5, len(s) // 2))
        works.append(s[:n])
        losses.append(loss[:n])
    targets = np.array([0.9 * x.min() for x in losses])
    done, t0 = 0, clock()
    while clock() - t0 < seconds:
        predictor.predict(works, losses, targets)
        done += batch
    return done / (clock() - t0)


@dataclass(frozen=True)
class _FreeFit(FittedPrefixes):
    current: np.ndarray
    fallback: np.ndarray
    ratios: np.ndarray

    def remaining(self, targets: np.ndarray, tasks: np.ndarray | None = None) -> RemainingWork:
        k = self._tasks(targets, tasks)
        return RemainingWork(self.current[k][:, None] * self.ratios, self.fallback[k])


class FreePredictor(RemainingWorkPredictor):
    """A stand-in that costs (almost) nothing to fit: 32 fixed multiples of the current work.

    Timing the wrapper with it bounds what any predictor can reach with the wrapper's
    per-tick path (cache, quantiles, deadline probabilities, flow_share counts, gathers).
    """

    name = "free"

    def __init__(self, n_samples: int = 32) -> None:
        self.ratios = np.geomspace(0.05, 20.0, n_samples)

    def fit(self, works, losses) -> _FreeFit:
        fallback = np.array([len(w) < MIN_REPORTS for w in works], bool)
        return _FreeFit(current_work(works), fallback, self.ratios)


def random_step(e, rng: np.random.Generator) -> bool:
    """One agent step of ``e`` with a uniformly random valid action; False (no step) once
    the episode has ended."""
    obs, _, term, trunc, _ = e.last()
    if term or trunc:
        return False
    e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    return True


class RandomStepper:
    """Steps an AEC env with random valid actions, resuming where the last call stopped."""

    def __init__(self, make, clock=time.perf_counter) -> None:
        self.env = make()
        self.clock = clock
        self.rng = np.random.default_rng(0)
        self.seed = 0
        self.env.reset(seed=self.seed)

    def rate(self, seconds: float) -> float:
        """Agent steps per second over the next ``seconds``."""
        e, steps, clock = self.env, 0, self.clock
        t0 = clock()
        while clock() - t0 < seconds:
            if random_step(e, self.rng):
                steps += 1
            else:
                self.seed += 1
                e.reset(seed=self.seed)
        return steps / (clock() - t0)


def interleaved_rates(
    makers: dict, seconds: float, rounds: int, clock=time.perf_counter
) -> dict[str, list[float]]:
    """Agent steps per second of each env over ``rounds`` alternating turns of
    ``seconds / rounds`` each (every env continues its own episodes from turn to turn).

    On a shared machine the speed drifts by tens of percent within a minute; alternating
    the envs exposes them to the same drift, so per-turn ratios are far steadier than
    ratios of back-to-back long runs.
    """
    steppers = {name: RandomStepper(make, clock) for name, make in makers.items()}
    rates: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(rounds):
        for name, stepper in steppers.items():
            rates[name].append(stepper.rate(seconds / rounds))
    return rates


def episode_time(e, seed: int, clock=time.perf_counter) -> tuple[float, int]:
    """Seconds (of ``clock``) and agent steps of one whole episode of ``e`` from a reset
    with ``seed``, under random valid actions drawn from a generator seeded with ``seed``:
    the same episode in every env whose dynamics and masks are the same (the wrappers')."""
    rng = np.random.default_rng(seed)
    steps, t0 = 0, clock()
    e.reset(seed=seed)
    while random_step(e, rng):
        steps += 1
    return clock() - t0, steps


def paired_episodes(makers: dict, episodes: int, clock=time.perf_counter) -> dict[str, np.ndarray]:
    """Each env's seconds for the same ``episodes`` whole episodes (seeds 0, 1, ...),
    taken in turn episode by episode after one warm-up episode each: every env does the
    same work in a turn, so the per-episode ratios do not depend on which part of which
    episode a turn happened to time.  Raises if two envs stepped an episode differently."""
    envs = {name: make() for name, make in makers.items()}
    for e in envs.values():
        episode_time(e, 10_000, clock)
    times: dict[str, list[float]] = {name: [] for name in makers}
    for seed in range(episodes):
        steps = set()
        for name, e in envs.items():
            seconds, n = episode_time(e, seed, clock)
            times[name].append(seconds)
            steps.add(n)
        if len(steps) != 1:
            raise RuntimeError(f"episode {seed}: the envs took {sorted(steps)} steps")
    return {name: np.array(t) for name, t in times.items()}


def print_paired(times: dict[str, np.ndarray], clock_name: str) -> None:
    """Per env: the median of its per-episode ratios to the bare env, their middle half and
    spread, and the ratio of the totals."""
    base = times["env"]
    print(
        f"{'env':>18}: {np.median(base) * 1e3:9.1f} ms a median episode "
        f"({len(base)} paired episodes, {clock_name} clock)"
    )
    for name in list(times)[1:]:
        ratio = base / times[name]
        lo, hi = np.percentile(ratio, [25, 75])
        print(
            f"{name:>18}: {np.median(ratio):.2f}x the env (median of paired episodes; middle "
            f"half {lo:.2f}-{hi:.2f}x, all {ratio.min():.2f}-{ratio.max():.2f}x; totals "
            f"{base.sum() / times[name].sum():.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="flow checkpoint (default: shipped)")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds per predictor measurement and per env"
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=16,
        help="visible task slots (the shipped policy observes 32; docs/predictor.md tracks 16)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="alternating turns of env / flow wrapper / wls wrapper (the env speeds are "
        "medians over the turns; each env runs SECONDS / ROUNDS per turn)",
    )
    parser.add_argument(
        "--cheaper",
        action="store_true",
        help="also time the flow wrapper with cheaper settings than the shipped ones: 16 "
        "samples, 2 Euler steps, re-predicting after 25%% more reports (their accuracy "
        "cost on validation is in docs/predictor.md)",
    )
    parser.add_argument(
        "--bound",
        action="store_true",
        help="also time the wrapper with a predictor that costs nothing to fit (32 fixed "
        "multiples of the current work): the ceiling any predictor can reach with the "
        "wrapper's per-tick path",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=0,
        help="also time whole episodes in turn, the same seeds and actions in every env "
        "(seeds 0 ... EPISODES-1), and print the median of the per-episode ratios: the "
        "same work in every turn, so a steadier figure than the turns of fixed length",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time the predictors and envs by wall clock or by this process's CPU time "
        "(steadier when other jobs share the machine)",
    )
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    flow64 = load_predictor(args.checkpoint, n_samples=64)
    flow32 = load_predictor(args.checkpoint)  # FLOW_SAMPLES, the wrapper's
    for name, p in (
        ("flow (64 samples)", flow64),
        (f"flow ({FLOW_SAMPLES} samples)", flow32),
        ("wls", WLSPredictor()),
    ):
        rate = predictions_per_second(p, 64, args.seconds, clock)
        print(f"{name:>18}: {rate:9.0f} predictions/s (batch 64)")
    kw = {"num_nodes": 16, "num_slots": args.slots}
    makers = {
        "env": lambda: env(**kw),
        "+ flow wrapper": lambda: PredictorFeatures(env(**kw), flow32),
        "+ wls wrapper": lambda: PredictorFeatures(env(**kw), WLSPredictor()),
    }
    if args.bound:
        makers["+ free predictor"] = lambda: PredictorFeatures(env(**kw), FreePredictor())
    if args.cheaper:
        flow16 = load_predictor(args.checkpoint, n_samples=16)
        euler2 = load_predictor(args.checkpoint, steps=2)
        refresh25 = PredictionSettings(refresh=0.25)
        makers |= {
            "flow, 16 samples": lambda: PredictorFeatures(env(**kw), flow16),
            "flow, 2 steps": lambda: PredictorFeatures(env(**kw), euler2),
            "flow, refresh 0.25": lambda: PredictorFeatures(env(**kw), flow32, refresh25),
        }
    rates = interleaved_rates(makers, args.seconds, args.rounds, clock)
    base = np.array(rates["env"])
    print(
        f"{'env':>18}: {np.median(base):9.0f} agent-steps/s "
        f"(16 nodes, {args.slots} slots, random masked actions; median of {args.rounds} turns, "
        f"{args.clock} clock)"
    )
    for name in list(makers)[1:]:
        r = np.array(rates[name])
        ratio = r / base
        print(
            f"{name:>18}: {np.median(r):9.0f} agent-steps/s "
            f"({np.median(ratio):.2f}x the env; per turn {ratio.min():.2f}-{ratio.max():.2f}x)"
        )
    if args.episodes:
        print_paired(paired_episodes(makers, args.episodes, clock), args.clock)


if __name__ == "__main__":
    main()
