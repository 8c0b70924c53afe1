"""``mara predictor task-work``: fit the remaining-work model that knows the task.

Plays ``--episodes`` episodes per deadline model, workload and load of the train split
with :data:`PLAYER` (fast, and a planner's states), records every
other tick each active task's features and exact remaining work
(:mod:`flow_predictor.task_work_fit`), fits the quantile network on them, then plays the
same settings on the validation split (traces the flow model never trained on) to fit
the recalibration per report count.  It fits the model twice, with and without the flow
model's inputs (``--out`` and ``--no-flow-out``), on the same rows, so that what the flow
model adds is measured against the strongest pipeline without it.
"""

from __future__ import annotations

import argparse
import sys
import time

# The scheduler that plays every episode the rows are recorded on, each knob that moves its
# decisions pinned: hedge on the deadline prior alone, a miss charged to the deadline,
# without urgency (hedge's default when the shipped models were fitted; with hedge's
# defaults of today the same command would record other states and fit another model).
PLAYER = "hedge:predictor=deadline:miss_cost=1:urgency=0"


def add_parser(sub: argparse._SubParsersAction, fmt: type) -> None:
    """The ``task-work`` sub-command of ``mara predictor``."""
    tw = sub.add_parser(
        "task-work",
        help="fit the calibrated remaining-work model (features a scheduler sees -> quantiles)",
        formatter_class=fmt,
    )
    tw.add_argument("--out", required=True, help="model file to write (new, or --force)")
    tw.add_argument(
        "--no-flow-out",
        default=None,
        help="also fit the same pipeline without the flow model's inputs, to this file",
    )
    tw.add_argument("--force", action="store_true", help="replace the output files if they exist")
    tw.add_argument(
        "--deadline-models",
        default="padded,unbiased,blind",
        help="deadline models of the episodes played (so it learns how far to trust each input)",
    )
    tw.add_argument(
        "--jobs",
        default="none,philly",
        help="workloads, comma-separated: none (synthetic) and/or a job trace (philly, ...)",
    )
    tw.add_argument("--loads", default="1.0,1.5,2.0", help="load factors of the episodes played")
    tw.add_argument(
        "--episodes", type=int, default=24, help="train episodes per deadline model, workload, load"
    )
    tw.add_argument(
        "--calibration-episodes",
        type=int,
        default=8,
        help="validation-split episodes per setting for the recalibration",
    )
    tw.add_argument("--every", type=int, default=2, help="record the tasks every this many ticks")
    tw.add_argument("--epochs", type=int, default=40, help="most training epochs (early stop)")
    tw.add_argument("--seed", type=int, default=0, help="seed of the episodes and the network")
    tw.add_argument(
        "--device",
        default=None,
        help="torch device to train on (default: cuda when available, else cpu)",
    )
    tw.add_argument("--quiet", action="store_true", help="no progress bars")
    tw.set_defaults(_run=run_task_work)


def run_task_work(args: argparse.Namespace) -> int:
    """Collect the rows, fit both models, write them."""
    from contextlib import ExitStack, nullcontext

    from flow_predictor.checkpoint import load_predictor
    from flow_predictor.quantile_net import QuantileNetConfig
    from flow_predictor.remaining import FLOW_SAMPLES
    from flow_predictor.task_work_fit import collect, fit_model
    from flow_predictor.train import resolve_device
    from mara_agents.commands import checks
    from mara_agents.evaluation.registry import make_scheduler
    from mara_agents.outputs import OutputError, claim_file
    from mara_agents.planning.history import ClusterHistory
    from mara_env.config import DEADLINE_MODELS, ClusterConfig, ConfigError
    from mara_env.schedulers import Scheduler
    from mara_env.traces import TraceError, load_traces

    command = "predictor task-work"
    name = f"mara {command}"
    checks.check_device(args.device)  # a usage error: exit 2
    try:
        loads = [
            checks.positive(v, "--loads")
            for v in checks.parse_list(args.loads, "--loads", float, "load factors > 0")
        ]
        jobs = checks.parse_list(args.jobs, "--jobs", str, "workloads (none, philly, ...)")
        models = checks.parse_list(
            args.deadline_models, "--deadline-models", str, ", ".join(DEADLINE_MODELS)
        )
        for m in models:
            checks.check(m in DEADLINE_MODELS, "--deadline-models", m, ", ".join(DEADLINE_MODELS))
        for option in ("episodes", "calibration_episodes", "every", "epochs"):
            value = getattr(args, option)
            checks.check(value >= 1, f"--{option.replace('_', '-')}", value, "an integer >= 1")
        device = str(resolve_device(args.device))

        def settings(split: str) -> list:
            out = []
            for model in models:
                for job in jobs:
                    for load in loads:
                        config = ClusterConfig(
                            split=split,
                            load=load,
                            deadline_model=model,
                            jobs=None if job == "none" else job,
                        )
                        if config.jobs is not None:
                            checks.replay_line(config)
                        out.append((config, ClusterHistory.of(config).prior))
            return out

        train_settings, cal_settings = settings("train"), settings("val")
        stack = ExitStack()
        outs = [stack.enter_context(claim_file(args.out, command=command, force=args.force))]
        if args.no_flow_out:
            outs.append(
                stack.enter_context(
                    claim_file(
                        args.no_flow_out, command=command, force=args.force, option="--no-flow-out"
                    )
                )
            )
    except (checks.UsageError, OutputError, ConfigError, TraceError, ValueError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2  # nothing was run: a usage error, as `mara predictor train`'s
    from tqdm import tqdm

    start = time.monotonic()
    flow = load_predictor(n_samples=FLOW_SAMPLES)

    def play() -> Scheduler:
        return make_scheduler(PLAYER)

    total = len(train_settings) * args.episodes + len(cal_settings) * args.calibration_episodes
    bar = tqdm(total=total, desc="episodes", unit="ep", disable=args.quiet)
    with stack, bar if not args.quiet else nullcontext():
        train = collect(
            train_settings,
            load_traces(split="train"),
            args.episodes,
            args.seed,
            play,
            flow,
            args.every,
            bar.update,
        )
        calibrate = collect(
            cal_settings,
            load_traces(split="val"),
            args.calibration_episodes,
            args.seed,
            play,
            flow,
            args.every,
            bar.update,
        )
        bar.close()
        fitted_on = {
            "deadline_models": models,
            "jobs": jobs,
            "loads": loads,
            "episodes": args.episodes,
            "calibration_episodes": args.calibration_episodes,
            "every": args.every,
            "seed": args.seed,
            "train_split": "train",
            "calibration_split": "val",
            "played_by": PLAYER,
        }
        config = QuantileNetConfig(epochs=args.epochs, seed=args.seed)
        for out, uses_flow in zip(outs, (True, False)):
            model, record = fit_model(
                train, calibrate, uses_flow, config, fitted_on, device, not args.quiet
            )
            model.save(out)
            print(
                f"wrote {out} ({'with' if uses_flow else 'without'} the flow model; "
                f"{len(train.y)} train rows, {len(calibrate.y)} calibration rows, "
                f"validation pinball {record['best_val']:.4f})"
            )
    print(f"{time.monotonic() - start:.0f} s")
    return 0
