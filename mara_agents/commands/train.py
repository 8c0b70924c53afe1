"""Train a MARA policy from an experiment YAML with RLlib PPO under Ray Tune.

Results, TensorBoard event files and checkpoints go to ``OUT/<name>/``; ``--resume``
continues an interrupted run from its last checkpoint.  See docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from mara_agents.commands import checks

# what a run and Tune write in OUT/<name> (a folder of only these, made before runs were
# marked, may be replaced with --force)
RUN_FILES = (
    "experiment.yaml",
    "tuner.pkl",
    "trainable.pkl",
    "experiment_state-*",
    "basic-variant-state-*",
    "*.sha256",
    ".validate_storage_marker",
)
RUN_DIRS = ("PPO_*",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "experiment", metavar="FILE.yaml", help="experiment file (see experiments/)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in OUT/<name> from its last checkpoint (with --pretrain-only: "
        "reuse the finished behaviour-cloning and DAgger stages in OUT)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="address of a running Ray cluster; omitted: start a local one",
    )
    parser.add_argument(
        "--out",
        default="runs",
        help="directory of runs: this one goes to OUT/<name>, which must be new or empty (or "
        "--resume, --force)",
    )
    checks.add_force_argument(parser, "OUT/<name>")
    parser.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        help="override rllib.env_runners.num_env_runners (sampling processes)",
    )
    parser.add_argument(
        "--jobs",
        default=None,
        help="train on replayed days of a job trace instead of the YAML's workload: 'philly' "
        "or a table from `mara jobs import` (sets env.jobs; the days of the YAML's env.split, "
        "'train' in the shipped experiments); 'none' forces the synthetic workload",
    )
    parser.add_argument("--verbose", type=int, default=1, help="Tune verbosity, 0-3")
    parser.add_argument(
        "--pretrain-only",
        action="store_true",
        help="only the behaviour-cloning warm start (no Ray, no PPO): writes "
        "OUT/<name>_pretrain.pt, which `mara export ... --experiment FILE.yaml` turns into a "
        "policy file",
    )


def run(args: argparse.Namespace) -> int:
    from mara_agents.outputs import OutputError, prepare_out, prepare_out_file
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.records import check_out
    from mara_env.config import ConfigError
    from mara_env.traces import TraceError

    try:
        exp = load_experiment(args.experiment)
        if args.jobs is not None:
            jobs = None if args.jobs == "none" else args.jobs
            exp = dataclasses.replace(exp, env=exp.env.replace(jobs=jobs))
        from mara_agents.evaluation.tuning import resolve_history
        from mara_agents.training.records import check_inputs

        check_inputs(exp)  # the files it reads load, before the history is drawn from them
        # built once, here: the env runners and the teacher are handed it
        exp = dataclasses.replace(exp, history=resolve_history(exp.env, exp.schedulers))
        if args.pretrain_only:
            from mara_agents.training.clone import pretrain

            if not exp.pretrain.clones:
                raise ConfigError(
                    f"{args.experiment}: --pretrain-only: expected pretrain.episodes > 0, or "
                    "pretrain.init_weights with pretrain.dagger_rounds > 0 (got episodes "
                    f"{exp.pretrain.episodes}, dagger_rounds {exp.pretrain.dagger_rounds}, "
                    f"init_weights {exp.pretrain.init_weights!r})"
                )
            out = Path(args.out) / f"{exp.name}_pretrain.pt"
            if not args.resume:
                prepare_out_file(out, force=args.force, resumable=True, option="warm start")
            path = pretrain(exp, out, log=print, resume=args.resume)
            print(
                f"wrote {path}; export: mara export {path} --experiment {args.experiment} "
                "--out P.pt"
            )
            return 0
        from mara_agents.training.curves import plot_learning_curves, write_learning_curves_csv
        from mara_agents.training.train import train

        checks.ray_address(args.address)
        if exp.pretrain.clones and not args.resume:  # the warm start beside the run
            warm = check_out(args.out) / f"{exp.name}_pretrain.pt"
            prepare_out_file(warm, force=args.force, resumable=True, option="warm start")
        run_dir = prepare_out(
            check_out(args.out) / exp.name,
            command="train",
            force=args.force,
            resume=args.resume,
            resumable=True,
            files=RUN_FILES,
            dirs=RUN_DIRS,
            option="run folder",
        )
        with run_dir:
            grid = train(
                exp,
                out=args.out,
                resume=args.resume,
                address=args.address,
                num_env_runners=args.num_env_runners,
                verbose=args.verbose,
            )
    except (ConfigError, OutputError, TraceError, checks.UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    errors = [r.error for r in grid if r.error]
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    best = grid[0]
    print(f"run directory: {best.path}")
    if best.checkpoint:
        print(f"last checkpoint: {best.checkpoint.path}")
    if (Path(best.path) / "result.json").is_file():
        png = plot_learning_curves(best.path, Path(best.path) / "learning_curves.png")
        csv = write_learning_curves_csv(best.path, Path(best.path) / "learning_curves.csv")
        print(f"learning curves: {png}, {csv}")
    return 1 if errors else 0
