"""Checks of command-line values shared by the commands.

Each bad value stops its command with one line that names the option and what was
expected, before any work starts (the commands print :class:`UsageError` and exit 2).
"""

from __future__ import annotations

import argparse
import math
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mara_agents.outputs import output_dir_problem

T = TypeVar("T")


class UsageError(ValueError):
    """A bad command-line value; the message names the option and what was expected."""


def parse_list(text: str, option: str, cast: Callable[[str], T], expected: str) -> list[T]:
    """The comma-separated values of ``option``: at least one, none empty, each castable,
    none given twice."""
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise UsageError(f"{option} {text!r}: empty; expected comma-separated {expected}")
    if not all(items):
        raise UsageError(
            f"{option} {text!r}: an empty item (two commas in a row, or one at an end); "
            f"expected comma-separated {expected} with no empty item"
        )
    values = []
    for item in items:
        try:
            values.append(cast(item))
        except ValueError:
            raise UsageError(f"{option}: {item!r} is not valid; expected {expected}") from None
    for i, value in enumerate(values):
        if value in values[:i]:
            raise UsageError(f"{option}: {items[i]!r} is given twice; give each value once")
    return values


def check(ok: bool, option: str, value: object, expected: str) -> None:
    """Raise :class:`UsageError` naming ``option`` and ``value`` unless ``ok``."""
    if not ok:
        raise UsageError(f"{option} {value}: expected {expected}")


def at_least(value: int, option: str, low: int) -> int:
    """``value``, unless it is below ``low``."""
    check(value >= low, option, value, f"an integer >= {low}")
    return value


def positive(value: float, option: str) -> float:
    """``value``, unless it is not a finite number > 0."""
    check(math.isfinite(value) and value > 0, option, value, "a finite number > 0")
    return value


def seed(text: str) -> int:
    """A base seed: a non-negative integer (numpy seeds cannot be negative)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


# Arguments that name files or folders (argparse dests): checked by :func:`check_paths`
PATH_ARGUMENTS = (
    "out",
    "csv",
    "ship",
    "cluster",
    "traces",
    "jobs",
    "file",
    "files",
    "runs",
    "checkpoint",
    "experiment",
    "library",
)
NAME_MAX = 255  # bytes in one name of a path (Linux, macOS)
PATH_MAX = 4096  # bytes in a whole path (Linux)


def path_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot name a file here (not valid UTF-8, a name or the whole too
    long), as "<what>; expected <what>", or None."""
    raw = os.fsencode(path)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not valid UTF-8; expected a name in UTF-8"
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        name = longest.decode()[:20]
        return (
            f"a name of {len(longest)} bytes ({name!r}...); expected at most {NAME_MAX} "
            "bytes in a name"
        )
    if len(raw) > PATH_MAX:
        return f"{len(raw)} bytes long; expected a path of at most {PATH_MAX} bytes"
    return None


def check_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Raise :class:`UsageError` for the first path argument (:data:`PATH_ARGUMENTS`) that
    cannot name a file (:func:`path_problem`), naming its option."""
    names = _option_names(parser)
    for dest in PATH_ARGUMENTS:
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, (str, os.PathLike)):
                problem = path_problem(path)
                if problem is not None:
                    shown = os.fsdecode(path)[:60] + ("..." if len(os.fsdecode(path)) > 60 else "")
                    raise UsageError(f"{names.get(dest, dest)} {shown!r}: {problem}")


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of ``parser`` and of its sub-commands, depth first."""
    found: list[argparse.Action] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _all_actions(sub)
        else:
            found.append(action)
    return found


def _option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each argument's name as the user wrote it (``--out``, ``FILE``), by dest, in the
    parser and its sub-commands."""
    names: dict[str, str] = {}
    for action in _all_actions(parser):
        if action.option_strings:
            names.setdefault(action.dest, action.option_strings[-1])
        else:
            metavar = action.metavar if isinstance(action.metavar, str) else None
            names.setdefault(action.dest, metavar or action.dest.upper())
    return names


# The range of every number an option takes (low, high; inclusive, ``open`` excludes
# low), by option: checked by :func:`check_numbers` before any command runs, so a size no
# machine could hold stops at once.  A test asks that every int or float option is here.
RANGES: dict[str, tuple[float, float] | tuple[float, float, str]] = {
    "--nodes": (1, 65_536),
    "--jobs-nodes": (1, 65_536),
    "--horizon": (1, 1_000_000),
    "--episodes": (1, 1_000_000),
    "--jobs-episodes": (1, 1_000_000),
    "--seed": (0, 2**32 - 1),
    "--workers": (1, 1024),
    "--num-env-runners": (0, 1024),
    "--threads": (1, 1024),
    "--verbose": (0, 3),
    "--smooth": (1, 100_000),
    "--n": (1, 1_000_000),
    "--samples": (1, 65_536),
    "--load": (0, 100, "open"),
    "--tick-seconds": (0, 86_400, "open"),
    "--min-duration": (0, 86_400 * 365),
    "--max-gpu-hours": (0, math.inf, "open"),
    "--epochs": (0, 1_000_000),
    "--prior-epochs": (1, 1_000_000),
    "--batch-size": (1, 1_000_000),
    "--prefixes-per-trace": (1, 100_000),
    "--prior-prefixes": (1, 100_000),
    "--synthetic": (0, 10_000_000),
    "--prior-curves": (0, 10_000_000),
    "--hidden": (1, 65_536),
    "--depth": (1, 1024),
    "--lr": (0, 10, "open"),
    "--prior-lr": (0, 10, "open"),
    "--sim-like": (0, 1),
    "--max-minutes": (0, 525_600, "open"),
}
# What one task of an episode holds in memory, generously (workload, simulator state,
# predictions); an episode whose tasks would need more than the machine has is refused.
TASK_BYTES = 2048
# ... and what one slot feature of one node's view takes (float32, and a copy of it)
SLOT_BYTES = 8


def numeric_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The int and float options of ``parser`` and its sub-commands: dest -> option."""
    return {
        action.dest: action.option_strings[-1]
        for action in _all_actions(parser)
        if action.type in (int, float) and action.option_strings
    }


def in_range(value: float, option: str) -> float:
    """``value``, unless it is outside ``option``'s range in :data:`RANGES`."""
    low, high, *open_ = RANGES[option]
    kind = "an integer" if isinstance(value, int) else "a number"
    above = value > low if open_ else value >= low
    expected = f"{kind} in {'(' if open_ else '['}{_number(low)}, {_number(high)}]"
    check(math.isfinite(value) or value == high, option, value, expected)
    check(above and value <= high, option, value, expected)
    return value


def check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Raise :class:`UsageError` for the first number outside its option's range."""
    for dest, option in numeric_options(parser).items():
        value = getattr(args, dest, None)
        if value is not None and option in RANGES:
            in_range(value, option)


def check_memory(config: object, option: str | None = None) -> None:
    """Raise :class:`UsageError` when an episode of ``config`` (a ClusterConfig) would need
    more than this machine's memory, with the figure: its tasks (a replayed job trace's
    are counted when its days are read) and the env's slot features of every node."""
    from mara_env.cluster_env import SLOT_FEATURES
    from mara_env.workload import arrival_rate

    tasks = 0.0 if config.jobs is not None else arrival_rate(config) * config.horizon
    slots = float(config.num_nodes) * config.num_slots * len(SLOT_FEATURES) * SLOT_BYTES
    need = tasks * TASK_BYTES + slots
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > have:
        option = option or "--nodes and --horizon"
        raise UsageError(
            f"{option} ({config.num_nodes} nodes, {config.horizon} ticks, load "
            f"{config.load:g}, num_slots {config.num_slots}): an episode would hold about "
            f"{tasks:.3g} tasks and {_size(slots)} of slot features, about {_size(need)} of "
            f"memory; this machine has {_size(have)}: expected fewer nodes, slots or ticks, "
            "or a lower load"
        )


def _number(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:g}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"


def check_output_dir(path: str | os.PathLike, option: str = "--out", label: object = None) -> None:
    """Raise :class:`UsageError` unless new files can be written in directory ``path``
    (which may not exist yet); messages show ``label`` (default: ``path``) as the value.

    Checked by writing a probe file (:func:`mara_agents.outputs.output_dir_problem`).
    """
    label = Path(path) if label is None else label
    problem = output_dir_problem(path, label)
    if problem is not None:
        raise UsageError(f"{option} {label}: {problem}")


def ray_address(address: str | None, option: str = "--address", timeout: float = 5.0) -> None:
    """Raise :class:`UsageError` unless a Ray head answers at ``address`` (``HOST:PORT``, or
    ``ray://HOST:PORT``) within ``timeout`` seconds: Ray itself retries for minutes.
    ``auto`` (and None) are left to Ray, which says at once when it finds no cluster."""
    if address is None or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    expected = "HOST:PORT of a running Ray head (as `ray start --head` prints it), or 'auto'"
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{option} {address or repr(address)}: expected {expected}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise UsageError(f"{option} {address}: no answer ({why}); expected {expected}") from None


def add_force_argument(parser: argparse.ArgumentParser, what: str = "OUT") -> None:
    """``--force``: replace a run's output instead of refusing it (docs/outputs.md)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace what {what} holds from an earlier run (without it, a non-empty {what} "
        "is refused)",
    )


def output_file(path: str | os.PathLike, option: str = "--out") -> None:
    """Raise :class:`UsageError` unless file ``path`` can be written (see
    :func:`check_output_dir` for its directory)."""
    path = Path(path)
    check(not path.is_dir(), option, path, "a file path, not a directory")
    check_output_dir(path.parent, option, label=path)


def run_lists(args: argparse.Namespace) -> tuple[list[str], list[float], list[int]]:
    """``--schedulers``, ``--loads`` and ``--seeds`` of an evaluation command, checked, with
    ``--episodes`` and ``--workers``."""
    specs = parse_list(args.schedulers, "--schedulers", str, "scheduler specs")
    loads = parse_list(args.loads, "--loads", float, "load factors")
    seeds = parse_list(args.seeds, "--seeds", seed, "non-negative integer seeds")
    at_least(args.episodes, "--episodes", 1)
    if args.workers is not None:
        at_least(args.workers, "--workers", 1)
    return specs, loads, seeds


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``mara simulate``: trace library, split, cluster size, jobs."""
    parser.add_argument(
        "--traces", default=None, help="trace library file (default: the shipped library)"
    )
    parser.add_argument(
        "--split", default="test", help="trace split: train, val, test or all (held-out: test)"
    )
    parser.add_argument("--nodes", type=int, default=16, help="number of compute nodes N")
    parser.add_argument("--horizon", type=int, default=120, help="ticks during which tasks arrive")
    parser.add_argument(
        "--jobs",
        default=None,
        help="replay a cluster's job trace instead of synthetic arrivals: 'philly' (shipped) "
        "or a table from `mara jobs import`; an episode is one day of the --split's days "
        "(24 h in --horizon ticks), thinned to the load (docs/jobs.md)",
    )
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="CLUSTER.yaml",
        help="simulator settings from `mara calibrate` (reassign_cost, alpha_range, "
        "throughput_noise) or any other ClusterConfig keys the options above do not set",
    )


# ClusterConfig keys the shared options set: a --cluster file may not set them too
CLUSTER_FLAGS = {
    "traces": "--traces",
    "split": "--split",
    "num_nodes": "--nodes",
    "horizon": "--horizon",
    "jobs": "--jobs",
    "load": "the load options",
}


def replay_line(config: object, option: str = "--loads") -> str:
    """The line on what a replayed job trace (``config.jobs``, a ClusterConfig's) replays
    at ``config.load``; :class:`UsageError` naming ``--jobs`` and ``option`` if the table
    cannot be read or no day carries the load."""
    from mara_env.job_logs import JobsError
    from mara_env.replay import replay_summary

    try:
        return replay_summary(config)
    except JobsError as exc:
        raise UsageError(f"--jobs {config.jobs} at {option} {config.load:g}: {exc}") from None


def cluster_from_args(args: argparse.Namespace, loads: list[float], option: str) -> tuple:
    """The cluster of the shared options, checked at each of ``loads`` (given as
    ``option``), and its traces, loaded now so that a bad library stops the command before
    any episode runs; a replayed job trace (``--jobs``) is checked to carry every load, and
    a line on what it replays is printed."""
    import numpy as np

    from mara_env.config import ClusterConfig, ConfigError, load_cluster_file
    from mara_env.traces import load_traces

    fitted = {}
    if args.cluster is not None:
        fitted = load_cluster_file(args.cluster, CLUSTER_FLAGS)
    try:
        config = ClusterConfig(
            **fitted,
            traces=args.traces,
            split=args.split,
            num_nodes=args.nodes,
            horizon=args.horizon,
            jobs=args.jobs,
        )
    except ConfigError as exc:
        if args.jobs is None:
            raise
        raise UsageError(f"--jobs {args.jobs}: {exc}") from None
    for load in loads:
        try:
            at_load = config.replace(load=load)
        except ConfigError as exc:
            raise UsageError(f"{option}: {exc}") from None
        check_memory(at_load, "--nodes, --horizon and --cluster" if args.cluster else None)
        if config.jobs is not None:
            print(replay_line(at_load, option))
    traces = load_traces(config.traces, split=config.split)
    if config.families:  # set by --cluster: every family named must be in the split
        known = sorted(set(traces.families))
        unknown = [f for f in config.families if f not in known]
        if unknown:
            raise UsageError(
                f"--cluster {args.cluster}: families: {unknown} not in the {config.split} "
                f"split of the trace library; expected some of {known}"
            )
        traces = traces.subset(np.isin(traces.families, config.families))
    return config, traces


def check_device(name: str | None, option: str = "--device") -> None:
    """UsageError naming ``option`` and the torch devices expected unless ``name`` (None:
    the default) is one this machine can train on; a command calls it outside its own
    ``try``, so that the CLI reports it as its range checks, with exit status 2."""
    from flow_predictor.train import resolve_device

    try:
        resolve_device(name)
    except ValueError as exc:
        raise UsageError(f"{option} {name}: {exc}") from None
