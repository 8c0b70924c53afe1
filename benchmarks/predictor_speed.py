"""Predictor and wrapped-environment throughput (prints figures; not a timed assertion).

How to run::

    python benchmarks/predictor_speed.py [--checkpoint CKPT] [--seconds 5]

Results to expect (2-core CPU, one torch thread): see docs/predictor.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from flow_predictor.checkpoint import load_predictor
from flow_predictor.wls import WLSPredictor
from flow_predictor.wrapper import PredictorFeatures
from mara_env.env import env
from mara_env.traces import load_traces


def predictions_per_second(predictor, batch: int, seconds: float) -> float:
    """Remaining-work predictions per second for batches of ``batch`` tasks."""
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
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        predictor.predict(works, losses, targets)
        done += batch
    return done / (time.perf_counter() - t0)


def agent_steps_per_second(make, seconds: float) -> float:
    """AEC agent steps per second with random valid actions."""
    e = make()
    rng = np.random.default_rng(0)
    steps, seed, t0 = 0, 0, time.perf_counter()
    e.reset(seed=seed)
    while time.perf_counter() - t0 < seconds:
        obs, _, term, trunc, _ = e.last()
        if term or trunc:
            seed += 1
            e.reset(seed=seed)
            continue
        e.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        steps += 1
    return steps / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="flow checkpoint (default: shipped)")
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement")
    parser.add_argument(
        "--slots", type=int, default=16, help="visible task slots (the shipped policy's: 16)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    flow64 = load_predictor(args.checkpoint)
    flow32 = load_predictor(args.checkpoint, n_samples=32)
    for name, p in (
        ("flow (64 samples)", flow64),
        ("flow (32 samples)", flow32),
        ("wls", WLSPredictor()),
    ):
        rate = predictions_per_second(p, 64, args.seconds)
        print(f"{name:>18}: {rate:9.0f} predictions/s (batch 64)")
    kw = {"num_nodes": 16, "num_slots": args.slots}
    base = agent_steps_per_second(lambda: env(**kw), args.seconds)
    wrapped = agent_steps_per_second(lambda: PredictorFeatures(env(**kw), flow32), args.seconds)
    wls = agent_steps_per_second(lambda: PredictorFeatures(env(**kw), WLSPredictor()), args.seconds)
    print(
        f"{'env':>18}: {base:9.0f} agent-steps/s "
        f"(16 nodes, {args.slots} slots, random masked actions)"
    )
    print(f"{'+ flow wrapper':>18}: {wrapped:9.0f} agent-steps/s ({wrapped / base:.2f}x)")
    print(f"{'+ wls wrapper':>18}: {wls:9.0f} agent-steps/s ({wls / base:.2f}x)")


if __name__ == "__main__":
    main()
