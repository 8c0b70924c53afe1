"""Train and evaluate the flow-matching loss predictor.

``mara predictor train`` fits the conditional flow-matching model on a trace library's
train split (validation split for model selection), writing the best checkpoint to
``--out``, the latest (with optimiser state) next to it as ``*.last.pt``, and TensorBoard
scalars under ``<out dir>/tb``; with ``--prior-curves`` it first pretrains on curves of
the synthetic prior (``flow_predictor.prior``), then fine-tunes on the library.
``mara predictor evaluate`` compares the flow model with the WLS and Optimus baselines on
held-out traces and writes ``predictor_metrics.csv``, ``predictor_families.csv`` (per
family: MAE, CRPS, 50 % and 80 % interval coverage) and ``predictor_error.png``.
``mara predictor lofo`` trains without each family in turn and scores on it.
``mara predictor deadline-prior`` fits what deadlines say about work
(:mod:`flow_predictor.deadline_prior`) on a split's tasks and writes it as JSON.
``mara predictor task-work`` fits the calibrated remaining-work model
(:mod:`flow_predictor.task_work`; :mod:`mara_agents.commands.task_work`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flow_predictor.train import TrainConfig

# what `predictor evaluate` writes in --out
EVALUATE_FILES = ("predictor_metrics.csv", "predictor_families.csv", "predictor_error.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands ``train``, ``evaluate`` and ``lofo``."""
    sub = parser.add_subparsers(dest="predictor_command", metavar="ACTION")
    fmt = argparse.ArgumentDefaultsHelpFormatter
    t = sub.add_parser("train", help="train the flow model on a trace library", formatter_class=fmt)
    _training_options(t, out_help="checkpoint to write (best epoch)")
    t.add_argument("--resume", action="store_true", help="continue from OUT's .last.pt checkpoint")
    t.add_argument(
        "--force",
        action="store_true",
        help="replace OUT and its .last.pt from an earlier run (without it they are refused)",
    )
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
    e.add_argument(
        "--out", required=True, help="directory for the metrics CSVs and the plot: new or empty"
    )
    e.add_argument(
        "--force", action="store_true", help="replace what OUT holds from an earlier run"
    )
    e.add_argument(
        "--samples", type=int, default=None, help="flow samples per prediction (default 32)"
    )
    e.set_defaults(_run=run_evaluate)

    lo = sub.add_parser(
        "lofo",
        help="leave one family out: train without each family, score on it",
        formatter_class=fmt,
    )
    _training_options(lo, out_help="directory for one model per family and lofo.csv")
    lo.add_argument(
        "--families", default=None, help="comma-separated families to leave out (default: all)"
    )
    lo.add_argument("--eval-split", default="test", help="split of each held-out family scored")
    lo.add_argument(
        "--samples", type=int, default=None, help="flow samples per prediction (default 32)"
    )
    lo.add_argument(
        "--force", action="store_true", help="replace what OUT holds from an earlier run"
    )
    lo.set_defaults(_run=run_lofo, out="runs/predictor/lofo")

    dp = sub.add_parser(
        "deadline-prior",
        help="fit the deadline prior (work / deadline-implied work) on a split's tasks",
        formatter_class=fmt,
    )
    dp.add_argument("--out", required=True, help="JSON file to write (new, or --force)")
    dp.add_argument("--force", action="store_true", help="replace OUT if it exists")
    dp.add_argument("--split", default="train", help="trace split whose tasks are drawn")
    dp.add_argument(
        "--jobs",
        default="none,philly",
        help="workloads, comma-separated: none (synthetic) and/or a job trace (philly, ...)",
    )
    dp.add_argument("--loads", default="1.0,1.5,2.0", help="load factors of the episodes drawn")
    dp.add_argument("--episodes", type=int, default=40, help="episodes per workload and load")
    dp.add_argument("--seed", type=int, default=0, help="base seed of the episodes drawn")
    dp.add_argument(
        "--cluster",
        default=None,
        metavar="CLUSTER.yaml",
        help="simulator settings of the tasks drawn (e.g. deadline_model: how users set "
        "deadlines on the cluster the prior is for); any ClusterConfig keys but split, "
        "load and jobs",
    )
    dp.set_defaults(_run=run_deadline_prior)

    from mara_agents.commands.task_work import add_parser

    add_parser(sub, fmt)


def _training_options(t: argparse.ArgumentParser, out_help: str) -> None:
    """The options of a training run (every TrainConfig field, with its default)."""
    from flow_predictor.train import TrainConfig

    d = TrainConfig()
    t.add_argument("--traces", default=None, help="trace library file (default: the shipped one)")
    t.add_argument("--split", default=d.split, help="split to train on")
    t.add_argument("--val-split", default=d.val_split, help="split for model selection")
    t.add_argument("--out", default=d.out, help=out_help)
    t.add_argument(
        "--epochs", type=int, default=d.epochs, help="epochs on the library (0: prior only)"
    )
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
        help="curves of the synthetic prior mixed into the library's training traces",
    )
    t.add_argument(
        "--prior-curves",
        type=int,
        default=d.prior_curves,
        help="pretrain on this many curves of the synthetic prior first (0: no pretraining)",
    )
    t.add_argument(
        "--prior-epochs", type=int, default=d.prior_epochs, help="pretraining epochs on the prior"
    )
    t.add_argument(
        "--prior-prefixes", type=int, default=d.prior_prefixes, help="prefixes per prior curve"
    )
    t.add_argument(
        "--prior-lr",
        type=float,
        default=None,
        help="pretraining peak learning rate (None: LR)",
    )
    t.add_argument(
        "--exclude-families",
        default="",
        help="comma-separated families left out of the train and validation splits",
    )
    t.add_argument("--hidden", type=int, default=d.hidden, help="velocity MLP width")
    t.add_argument("--depth", type=int, default=d.depth, help="velocity MLP hidden layers")
    t.add_argument("--seed", type=int, default=d.seed, help="seed of data draws and init")
    t.add_argument(
        "--device",
        default=None,
        help="torch device to train on: cpu, cuda, cuda:N (None: cuda when available, else cpu)",
    )
    t.add_argument(
        "--max-minutes", type=float, default=None, help="stop after this many minutes of training"
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")


def _train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of the training options; UsageError naming a bad one."""
    from flow_predictor.train import TrainConfig
    from mara_agents.commands import checks

    # each number's own range is checked by the CLI (checks.RANGES); this, across two:
    checks.check(
        args.epochs > 0 or args.prior_curves > 0,
        "--epochs",
        args.epochs,
        "at least 1, or --prior-curves > 0 for a model trained on the prior only",
    )
    return TrainConfig(
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
        prior_curves=args.prior_curves,
        prior_epochs=args.prior_epochs,
        prior_prefixes=args.prior_prefixes,
        prior_lr=args.prior_lr,
        exclude_families=tuple(f for f in args.exclude_families.split(",") if f),
        hidden=args.hidden,
        depth=args.depth,
        seed=args.seed,
        max_minutes=args.max_minutes,
        device=args.device,
    )


def run_train(args: argparse.Namespace) -> int:
    """Train, printing the best validation metrics."""
    from flow_predictor.checkpoint import CheckpointError
    from flow_predictor.train import train
    from mara_agents.commands import checks
    from mara_agents.outputs import OutputError, prepare_out_file
    from mara_env.traces import TraceError

    checks.check_device(args.device)  # a usage error: exit 2
    try:
        cfg = _train_config(args)
        checks.output_file(args.out)
        if not args.resume:  # a trained checkpoint, or one to resume, is never lost silently
            last = Path(args.out).with_suffix(".last.pt")
            prepare_out_file(args.out, force=args.force, resumable=True)
            prepare_out_file(last, force=args.force, resumable=True)
    except (checks.UsageError, OutputError) as exc:
        print(f"mara predictor train: error: {exc}", file=sys.stderr)
        return 2
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
    from mara_agents.commands.checks import UsageError
    from mara_agents.extras import require
    from mara_agents.outputs import OutputError, prepare_out

    require("predictor")
    import torch

    from flow_predictor.checkpoint import CheckpointError, load_predictor
    from flow_predictor.evaluate import evaluate_all, write_evaluation
    from flow_predictor.optimus import OptimusPredictor
    from flow_predictor.remaining import FLOW_SAMPLES
    from flow_predictor.wls import WLSPredictor
    from mara_env.traces import TraceError, load_traces

    torch.set_num_threads(1)
    source = args.traces or f"the shipped library's {args.split or 'test'} split"
    try:
        samples = FLOW_SAMPLES if args.samples is None else args.samples
        flow = load_predictor(args.checkpoint, n_samples=samples)
        traces = load_traces(args.traces, split=args.split or ("all" if args.traces else "test"))
        run_dir = prepare_out(
            args.out, command="predictor evaluate", force=args.force, files=EVALUATE_FILES
        )
    except (CheckpointError, TraceError, UsageError, OutputError) as exc:
        print(f"mara predictor evaluate: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    with run_dir:
        try:
            ev = evaluate_all([flow, WLSPredictor(), OptimusPredictor()], traces)
        except TraceError as exc:  # nothing to evaluate in these traces
            print(f"mara predictor evaluate: error: {source}: {exc}", file=sys.stderr)
            run_dir.abandon()
            return 1
        write_evaluation(ev, out)
    fmt = {"float_format": lambda v: f"{v:.3f}", "index": False}
    print(ev.metrics.to_string(**fmt))
    print("\nper family, all prefix fractions (coverage: of the 25-75 % and 10-90 % intervals)")
    print(ev.families.to_string(**fmt))
    written = ", ".join(str(out / f) for f in ("predictor_metrics.csv", "predictor_families.csv"))
    print(f"wrote {written} and {out / 'predictor_error.png'}")
    return 0


def run_lofo(args: argparse.Namespace) -> int:
    """Leave-one-family-out: train without each family and score on it; print the table."""
    from flow_predictor.lofo import leave_one_family_out
    from mara_agents.commands import checks
    from mara_agents.outputs import OutputError, prepare_out
    from mara_env.traces import TraceError

    checks.check_device(args.device)  # a usage error: exit 2
    try:
        cfg = _train_config(args)
        checks.check(
            not cfg.exclude_families,
            "--exclude-families",
            args.exclude_families,
            "nothing: lofo leaves out one family at a time itself",
        )
        samples = args.samples
        checks.check_output_dir(args.out)
        run_dir = prepare_out(
            args.out, command="predictor lofo", force=args.force, files=("lofo.csv",)
        )
    except (checks.UsageError, OutputError) as exc:
        print(f"mara predictor lofo: error: {exc}", file=sys.stderr)
        return 2
    families = [f for f in (args.families or "").split(",") if f] or None
    with run_dir:
        try:
            table = leave_one_family_out(
                cfg, args.out, families, args.eval_split, samples, progress=not args.quiet
            )
        except TraceError as exc:
            print(f"mara predictor lofo: error: {exc}", file=sys.stderr)
            run_dir.abandon()
            return 1
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {Path(args.out) / 'lofo.csv'}")
    return 0


def run_deadline_prior(args: argparse.Namespace) -> int:
    """Fit the deadline prior on the tasks of ``--episodes`` drawn episodes per workload and
    load of ``--split`` (their work ``W_k`` and deadlines) and write it to ``--out``."""
    import numpy as np

    from mara_agents.commands import checks
    from mara_agents.outputs import OutputError, claim_file
    from mara_agents.planning.history import fit_prior
    from mara_env.config import ClusterConfig, ConfigError
    from mara_env.traces import TraceError

    try:
        loads = checks.parse_list(args.loads, "--loads", float, "load factors > 0")
        for load in loads:
            checks.positive(load, "--loads")
        jobs = checks.parse_list(args.jobs, "--jobs", str, "workloads (none, philly, ...)")
        settings = {}
        if args.cluster is not None:
            from mara_env.config import load_cluster_file

            flags = {"split": "--split", "load": "--loads", "jobs": "--jobs"}
            settings = load_cluster_file(args.cluster, flags)
        for job in jobs:  # a job trace that cannot carry a load stops here, not later
            for load in loads:
                config = ClusterConfig(
                    **settings, split=args.split, load=load, jobs=None if job == "none" else job
                )
                if config.jobs is not None:
                    checks.replay_line(config)
        claim = claim_file(args.out, command="predictor deadline-prior", force=args.force)
    except (checks.UsageError, OutputError, ConfigError, TraceError, ValueError) as exc:
        print(f"mara predictor deadline-prior: error: {exc}", file=sys.stderr)
        return 2
    with claim as out:
        try:
            prior = fit_prior(settings, jobs, args.split, loads, args.episodes, args.seed)
        except (ConfigError, TraceError, ValueError) as exc:
            print(f"mara predictor deadline-prior: error: {exc}", file=sys.stderr)
            return 1
        prior.save(out)
    q = np.quantile(prior.log_ratios, [0.1, 0.5, 0.9])
    print(
        f"{prior.fitted_on['tasks']} tasks; log(work / deadline-implied work): 10 % "
        f"{q[0]:+.2f}, median {q[1]:+.2f}, 90 % {q[2]:+.2f}"
    )
    print(f"wrote {out}")
    return 0
