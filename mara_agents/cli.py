"""The ``mara`` command line: one entry point, one sub-command per job.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int`` (a command with sub-commands of its own, like ``mara traces``,
adds sub-parsers that set ``_run`` themselves).  Modules are imported only when their
command runs, so ``mara --help`` and ``mara simulate`` start fast (no torch, no ray).
A command that needs an optional dependency the install lacks stops with one line naming
the extra to install (:mod:`mara_agents.extras`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from mara_agents.commands import checks
from mara_agents.extras import as_missing_extra, require

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "reproduce": ("mara_agents.commands.reproduce", "the main job: predictor + scheduler results"),
    "simulate": ("mara_agents.commands.simulate", "run schedulers on the simulator, print a table"),
    "evaluate": ("mara_agents.commands.evaluate", "compare schedulers on the same episodes"),
    "traces": ("mara_agents.commands.traces", "collect, import and inspect trace libraries"),
    "jobs": ("mara_agents.commands.jobs", "import and inspect cluster job traces to replay"),
    "predictor": ("mara_agents.commands.predictor", "train and evaluate the loss predictor"),
    "train": (
        "mara_agents.commands.train",
        "train a MARA policy from an experiment YAML (RLlib PPO)",
    ),
    "export": (
        "mara_agents.commands.export",
        "export a training checkpoint to a torch-only policy file",
    ),
    "curves": ("mara_agents.commands.curves", "plot several training runs' learning curves"),
    "live": ("mara_agents.commands.live", "schedule real training jobs on a Ray cluster"),
    "calibrate": (
        "mara_agents.commands.calibrate",
        "fit the simulator's cluster (restore cost, speed-up, noise) to live runs",
    ),
    "history": ("mara_agents.commands.history", "tune a cluster's price of a miss, once"),
}

# command -> the extra it needs beyond the bare install, checked before it runs (``traces
# collect`` and the evaluate specs that need torch or ray check their own)
NEEDS: dict[str, str] = {
    "reproduce": "predictor",
    "predictor": "predictor",
    "train": "rllib",
    "export": "rllib",
    "curves": "rllib",
    "live": "live",
    "history": "predictor",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Option defaults in the help; the command's description (its module docstring, with
    examples) keeps its own line breaks."""


def _add_command(sub: argparse._SubParsersAction, name: str, module: str, help_: str) -> None:
    mod = importlib.import_module(module)
    p = sub.add_parser(
        name,
        help=help_,
        description=(mod.__doc__ or help_).strip(),
        formatter_class=HelpFormatter,
    )
    p.set_defaults(_run=getattr(mod, "run", None))
    mod.add_arguments(p)


def _command(argv: list[str]) -> str | None:
    """The command named on the command line (its first positional word)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser; only the chosen command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="mara",
        description="MARA: schedule compute nodes among learning tasks with deadlines.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = _command(argv)
    for name, (module, help_) in COMMANDS.items():
        if wanted == name:
            _add_command(sub, name, module, help_)
        else:
            sub.add_parser(name, help=help_)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was, so that it stops as after Ctrl-C: its
    ``finally`` blocks remove temporary files and release locks."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _stdout_to_devnull() -> None:
    """Send what is left to print to /dev/null: the reader of stdout has closed it, and
    Python would otherwise report the failed flush at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mara`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        checks.check_paths(parser, args)
        checks.check_numbers(parser, args)
        if args.command in NEEDS:
            require(NEEDS[args.command])
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # here, so that a reader gone away is seen below, not at exit
        return status
    except BrokenPipeError:  # stdout's reader stopped (`mara jobs info | head -1`)
        _stdout_to_devnull()
        return 0
    except checks.UsageError as exc:
        print(f"mara {_command(argv)}: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        missing = as_missing_extra(exc)
        if missing is None:
            raise
        print(f"mara {_command(argv)}: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        stopped = "stopped by SIGTERM" if isinstance(exc, Terminated) else "interrupted"
        again = (
            "rerun with --resume to continue, or --force to start again"
            if hasattr(args, "resume")
            else "rerun it"
        )
        print(f"mara {_command(argv)}: {stopped}; {again}", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
