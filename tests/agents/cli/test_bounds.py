"""Every number, path and list a user gives is checked before any work: a number outside
its option's stated range, a path no file system takes, a cluster file of unknown keys or
wrong types, anything given twice: one line naming the option, exit status 2."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

import pytest

from mara_agents.cli import COMMANDS, build_parser, main
from mara_agents.commands import checks
from tests.agents.cli.test_cli_inputs import refused

# the fewest arguments each command parses with (the checks run before the command)
BASE = {
    "reproduce": [],
    "simulate": [],
    "evaluate": ["--out", "o"],
    "traces collect": ["--out", "o.parquet"],
    "traces import": ["f.csv", "--out", "o.parquet"],
    "traces info": [],
    "jobs import": ["f.csv", "--out", "o.parquet"],
    "jobs info": [],
    "predictor train": [],
    "predictor evaluate": ["--out", "o"],
    "predictor lofo": [],
    "predictor deadline-prior": ["--out", "o.json"],
    "train": ["x.yaml"],
    "export": ["ckpt", "--out", "p.pt"],
    "curves": ["run", "--out", "c.png"],
    "live": ["jobs.yaml", "--out", "o"],
    "calibrate": ["run", "--out", "c.yaml"],
    "history fit": ["--out", "h.json"],
}


def _options(kind: tuple[type, ...]) -> list[tuple[str, str, type]]:
    """(command, option, type) of every option of a type in ``kind``, over every command."""
    found = []
    for command in BASE:
        words = command.split()
        parser = build_parser(words)
        sub = parser._subparsers._group_actions[0].choices[words[0]]
        if len(words) > 1:
            sub = next(
                a for a in sub._actions if isinstance(a, argparse._SubParsersAction)
            ).choices[words[1]]
        for action in sub._actions:
            if action.type in kind and action.option_strings:
                found.append((command, action.option_strings[-1], action.type))
    return found


def test_every_command_is_covered():
    assert {c.split()[0] for c in BASE} == set(COMMANDS)


@pytest.mark.parametrize(("command", "option", "kind"), _options((int, float)))
def test_every_number_has_a_range_checked_before_work(tmp_path, capsys, command, option, kind):
    assert option in checks.RANGES, f"{command} {option}: no range in checks.RANGES"
    low, high, *_ = checks.RANGES[option]
    bad = [str(int(low) - 1), *(["nan"] if kind is float else [])]
    if high != float("inf"):
        bad.append(str(int(high) + 1))
    for value in bad:
        refused([*command.split(), *BASE[command], option, value], capsys, option, "expected")
    assert list(tmp_path.iterdir()) == []


PATHS = [
    ("evaluate", "--out"),
    ("evaluate", "--cluster"),
    ("evaluate", "--traces"),
    ("evaluate", "--jobs"),
    ("simulate", "--cluster"),
    ("reproduce", "--out"),
    ("jobs import", "--out"),
    ("traces import", "--out"),
    ("calibrate", "--out"),
    ("predictor deadline-prior", "--out"),
    ("predictor deadline-prior", "--cluster"),
    ("curves", "--csv"),
    ("history fit", "--out"),
    ("history fit", "--cluster"),
]


@pytest.mark.parametrize(("command", "option"), PATHS)
@pytest.mark.parametrize("kind", ["too long", "not UTF-8"])
def test_a_path_no_file_system_takes_is_refused_naming_the_option(
    tmp_path, capsys, command, option, kind
):
    name = "a" * 300 if kind == "too long" else "caf\udce9"  # latin-1 bytes, not UTF-8
    path = f"{tmp_path}/{name}/x.csv"
    argv = [*command.split(), *BASE[command], option, path]
    refused(argv, capsys, option, "bytes in a name" if kind == "too long" else "UTF-8")
    assert list(tmp_path.iterdir()) == []


def test_a_size_no_memory_holds_is_refused_with_the_figure(capsys):
    argv = ["simulate", "--nodes", "60000", "--horizon", "1000000", "--load", "100"]
    refused(argv, capsys, "--nodes and --horizon", "TiB of memory", "this machine has")


EVALUATE = ["evaluate", "--loads", "1.0", "--episodes", "1", "--horizon", "10"]
EVALUATE += ["--workers", "1", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--schedulers", "hedge:quantiles=32,hedge:quantiles=032"], "names the same"),
        (["--schedulers", "lara:margin=1,lara:margin=1.0"], "names the same"),
        (["--schedulers", "edf,edf"], "given twice"),
        (["--loads", "1,1.0"], "given twice"),
        (["--seeds", "0,00"], "given twice"),
    ],
)
def test_anything_given_twice_is_refused(tmp_path, capsys, args, culprit):
    refused([*EVALUATE, *args, "--out", str(tmp_path / "o")], capsys, culprit)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("alpha_range: 0.8", "alpha_range=0.8: expected a pair (low, high)"),
        ("families: [nosuchfamily]", "families: ['nosuchfamily'] not in"),
        ("families: nosuchfamily", "families='nosuchfamily': expected a list of texts or null"),
        ("colour: red", "unknown key(s) ['colour']"),
        ("num_nodes: 4", "'num_nodes' is set by --nodes"),
        ("reassign_cost: .nan", "reassign_cost=nan"),
        ("horizon: [1]", "'horizon' is set by --horizon"),
        ("cap_choices: [2, two]", "cap_choices=[2, 'two']: expected a list of integers"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "evaluate"])
def test_a_bad_cluster_file_gets_one_line_naming_the_key(tmp_path, capsys, text, culprit, command):
    path = tmp_path / "cluster.yaml"
    path.write_text(text + "\n")
    argv = [*EVALUATE, "--out", str(tmp_path / "o")] if command == "evaluate" else ["simulate"]
    refused([*argv, "--cluster", str(path)], capsys, f"--cluster {path}", culprit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml"]


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--seed", "-1"], "--seed -1"),
        (["--jobs", "philly", "--loads", "50"], "--jobs philly at --loads 50"),
        (["--jobs", "{lib}"], "missing column"),
        (["--loads", "1,1.0"], "given twice"),
    ],
)
def test_deadline_prior_refuses_bad_values_in_one_line(tmp_path, capsys, args, culprit):
    pytest.importorskip("torch")
    from mara_env.traces import SHIPPED_LIBRARY

    args = [a.format(lib=SHIPPED_LIBRARY) for a in args]
    out = tmp_path / "prior.json"
    argv = ["predictor", "deadline-prior", "--episodes", "1", *args, "--out", str(out)]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and culprit in err, err
    assert list(tmp_path.iterdir()) == []


def _partial_run(tmp_path, monkeypatch, argv):
    """Run ``argv`` with the third batch of episodes interrupted, as Ctrl-C would."""
    from mara_agents.evaluation import runner

    run_job, calls = runner._run_job, []

    def stopped(job):
        calls.append(job)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run_job(job)

    monkeypatch.setattr(runner, "_run_job", stopped)
    assert main(argv) == 130
    monkeypatch.setattr(runner, "_run_job", run_job)


def test_evaluate_resume_runs_only_the_missing_episodes(tmp_path, capsys, monkeypatch):
    from mara_agents.evaluation import runner

    argv = [*EVALUATE, "--schedulers", "edf,uniform", "--loads", "1.0,1.5", "--episodes", "4"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*argv, "--out", str(whole)]) == 0
    _partial_run(tmp_path, monkeypatch, [*argv, "--out", str(part)])
    assert "--resume" in capsys.readouterr().err
    assert sorted(p.name for p in part.iterdir()) == [".mara-run", runner.PARTIAL]
    ran = []
    monkeypatch.setattr(runner, "make_jobs", lambda *a, **k: ran.append(a) or [])
    refused([*argv, "--episodes", "5", "--out", str(part), "--resume"], capsys, "episodes=4")
    monkeypatch.undo()
    assert main([*argv, "--out", str(part), "--resume"]) == 0
    assert (part / "results.csv").read_bytes() == (whole / "results.csv").read_bytes()
    assert not (part / runner.PARTIAL).exists()
    assert sorted(p.name for p in part.iterdir()) == sorted(p.name for p in whole.iterdir())


def test_sigterm_stops_evaluate_in_one_line_leaving_no_temporary_file(tmp_path):
    out = tmp_path / "o"
    argv = [*EVALUATE, "--schedulers", "edf,uniform", "--episodes", "100000", "--out", str(out)]
    code = "import sys; from mara_agents.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / ".mara-run").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into the episodes
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err.strip().splitlines()[-1].startswith("mara evaluate: stopped by SIGTERM")
    assert "Traceback" not in err and "--resume" in err
    left = [p.name for p in out.iterdir()] if out.exists() else []
    assert not [n for n in left if n.startswith(".") and n != ".mara-run"]
    assert set(left) <= {".mara-run", "results.partial.csv"}


@pytest.mark.parametrize("command", ["simulate", "evaluate"])
@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("num_slots: 1000000000\n", ["num_slots 1000000000", "of memory", "this machine has"]),
        ("estimate_menu: [0.5]\n", ["estimate_menu=[0.5]", "at most 1 tick", "takes 2 ticks"]),
        (
            "estimate_menu: [1, 2]\nsize_range: [8, 24]\n",
            ["estimate_menu=[1.0, 2.0]", "at most 3 tick", "takes 4 ticks"],
        ),
    ],
)
def test_a_cluster_no_run_can_use_is_refused_with_the_figure(
    tmp_path, capsys, command, text, culprit
):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(text)
    argv = [command, "--cluster", str(cluster), "--horizon", "10"]
    if command == "evaluate":
        argv += ["--schedulers", "uniform", "--episodes", "1", "--out", str(tmp_path / "out")]
    refused(argv, capsys, "--cluster", *culprit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]
