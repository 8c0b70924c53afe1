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


def cluster_from_args(args: argparse.Namespace, loads: list[float], option: str) -> tuple:
    """The cluster of the shared options, checked at each of ``loads`` (given as
    ``option``), and its traces, loaded now so that a bad library stops the command before
    any episode runs; a replayed job trace (``--jobs``) is checked to carry every load, and
    a line on what it replays is printed."""
    from mara_env.config import ClusterConfig, ConfigError
    from mara_env.job_logs import JobsError
    from mara_env.replay import replay_summary
    from mara_env.traces import load_traces

    fitted = {}
    if args.cluster is not None:
        from mara_agents.live.calibrate import read_cluster_file

        fitted = read_cluster_file(args.cluster, CLUSTER_FLAGS)
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
        if config.jobs is not None:
            try:
                print(replay_summary(at_load))
            except JobsError as exc:
                raise UsageError(f"--jobs {args.jobs} at {option} {load:g}: {exc}") from None
    return config, load_traces(config.traces, split=config.split)
