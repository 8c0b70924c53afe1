"""Train and evaluate the flow-matching loss predictor.

``mara predictor train`` fits the conditional flow-matching model on a trace library's
train split (validation split for model selection), writing the best checkpoint to
``--out``, the latest (with optimiser state) next to it as ``*.last.pt``, and TensorBoard
scalars under ``<out dir>/tb``.  ``mara predictor evaluate`` compares the flow model with
the WLS and Optimus baselines on held-out traces and writes ``predictor_metrics.csv`` and
``predictor_error.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands ``train`` and ``evaluate``."""
    from flow_predictor.train import TrainConfig

    d = TrainConfig()
    sub = parser.add_subparsers(dest="predictor_command", metavar="ACTION")
    fmt = argparse.ArgumentDefaultsHelpFormatter
    t = sub.add_parser("train", help="train the flow model on a trace library", formatter_class=fmt)
    t.add_argument("--traces", default=None, help="trace library file (default: the shipped one)")
    t.add_argument("--split", default=d.split, help="split to train on")
    t.add_argument("--val-split", default=d.val_split, help="split for model selection")
    t.add_argument("--out", default=d.out, help="checkpoint to write (best epoch)")
    t.add_argument("--epochs", type=int, default=d.epochs, help="training epochs")
    t.add_argument("--batch-size", type=int, default=d.batch_size, help="minibatch size")
    t.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (cosine decay)")
    t.add_argument(
        "--prefixes-per-trace", type=int, default=d.prefixes_per_trace, help="prefixes per trace"
    )
    t.add_argument(
        "--sim-like",
        type=float,
        default=d.sim_like,
        help="share of prefixes re-sampled as sparse simulator-style reports",
    )
    t.add_argument(
        "--synthetic",
        type=int,
        default=d.synthetic,
        help="number of synthetic sudden-drop curves added to the training traces",
    )
    t.add_argument("--hidden", type=int, default=d.hidden, help="velocity MLP width")
    t.add_argument("--depth", type=int, default=d.depth, help="velocity MLP hidden layers")
    t.add_argument("--seed", type=int, default=d.seed, help="seed of data draws and init")
    t.add_argument(
        "--max-minutes", type=float, default=None, help="stop after this many minutes of training"
    )
    t.add_argument("--resume", action="store_true", help="continue from OUT's .last.pt checkpoint")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(_run=run_train)

    e = sub.add_parser(
        "evaluate", help="compare flow, WLS and Optimus on held-out traces", formatter_class=fmt
    )
    src = e.add_mutually_exclusive_group()
    src.add_argument("--traces", default=None, help="trace file to evaluate on (all its traces)")
    src.add_argument(
        "--split", default=None, help="split of the shipped library to evaluate on (e.g. test)"
    )
    e.add_argument("--checkpoint", default=None, help="flow checkpoint (default: the shipped one)")
    e.add_argument("--out", required=True, help="directory for the metrics CSV and the plot")
    e.add_argument("--samples", type=int, default=64, help="flow samples per prediction")
    e.set_defaults(_run=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    """Train, printing the best validation metrics."""
    from flow_predictor.checkpoint import CheckpointError
    from flow_predictor.train import TrainConfig, train
    from mara_agents.commands import checks
    from mara_env.traces import TraceError

    try:
        for option in ("epochs", "batch_size", "prefixes_per_trace", "hidden", "depth"):
            checks.at_least(getattr(args, option), "--" + option.replace("_", "-"), 1)
        checks.at_least(args.synthetic, "--synthetic", 0)
        checks.at_least(args.seed, "--seed", 0)
        checks.positive(args.lr, "--lr")
        checks.check(0 <= args.sim_like <= 1, "--sim-like", args.sim_like, "a share in [0, 1]")
        if args.max_minutes is not None:
            checks.positive(args.max_minutes, "--max-minutes")
        checks.output_file(args.out)
    except checks.UsageError as exc:
        print(f"mara predictor train: error: {exc}", file=sys.stderr)
        return 1
    cfg = TrainConfig(
        traces=args.traces,
        split=args.split,
        val_split=args.val_split,
        out=args.out,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        prefixes_per_trace=args.prefixes_per_trace,
        sim_like=args.sim_like,
        synthetic=args.synthetic,
        hidden=args.hidden,
        depth=args.depth,
        seed=args.seed,
        max_minutes=args.max_minutes,
    )
    t0 = time.time()
    try:
        best = train(cfg, resume=args.resume, progress=not args.quiet)
    except (CheckpointError, TraceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"best validation {best}; wall {time.time() - t0:.0f} s; checkpoint {args.out}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """Evaluate every method, write the CSV and the plot, print the table."""
    from mara_agents.commands.checks import UsageError, at_least, check_output_dir
    from mara_agents.extras import require

    require("predictor")
    import torch

    from flow_predictor.checkpoint import CheckpointError, load_predictor
    from flow_predictor.evaluate import evaluate_to_dir
    from flow_predictor.optimus import OptimusPredictor
    from flow_predictor.wls import WLSPredictor
    from mara_env.traces import TraceError, load_traces

    torch.set_num_threads(1)
    source = args.traces or f"the shipped library's {args.split or 'test'} split"
    try:
        samples = at_least(args.samples, "--samples", 1)
        check_output_dir(args.out)
        flow = load_predictor(args.checkpoint, n_samples=samples)
        traces = load_traces(args.traces, split=args.split or ("all" if args.traces else "test"))
    except (CheckpointError, TraceError, UsageError) as exc:
        print(f"mara predictor evaluate: error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    try:
        metrics = evaluate_to_dir([flow, WLSPredictor(), OptimusPredictor()], traces, out)
    except TraceError as exc:  # nothing to evaluate in these traces
        print(f"mara predictor evaluate: error: {source}: {exc}", file=sys.stderr)
        return 1
    print(metrics.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out / 'predictor_metrics.csv'} and {out / 'predictor_error.png'}")
    return 0
