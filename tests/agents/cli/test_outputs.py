"""One rule for output folders: a run never overwrites or mixes another's results.

A non-empty folder is refused (one line naming it and the choices) unless it is this
command's run and --resume continues it, or --force replaces it; a run that is writing
holds a lock that stops a second one at once; what the run will write is checked before
it starts; a refused or failed start leaves the file system as it was.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mara_agents.cli import main
from mara_agents.outputs import MARKER, OutputError, prepare_out, prepare_out_file
from mara_env.atomic import atomic_path, atomic_write

ROOT = Path(__file__).resolve().parents[3]
EVALUATE = ["evaluate", "--schedulers", "edf,uniform", "--loads", "1.0", "--episodes", "1"]
EVALUATE += ["--workers", "1", "--horizon", "10", "--no-progress"]


def refused(argv: list[str], capsys: pytest.CaptureFixture, *culprit: str) -> str:
    """Run ``mara ARGV``; assert a non-zero exit and one stderr line naming every culprit."""
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in culprit:
        assert word in err, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (markers aside) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


# ---- the rule itself --------------------------------------------------------------------


def test_a_new_folder_is_taken_and_marked_as_the_commands_run(tmp_path):
    out = tmp_path / "a" / "b"
    with prepare_out(out, command="evaluate") as run:
        assert not run.resumed
        (out / "results.csv").write_text("x")
    assert '"command": "evaluate"' in (out / MARKER).read_text()


def test_a_non_empty_folder_is_refused_naming_it_and_the_choices(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError) as err:
        prepare_out(out, command="evaluate")
    message = str(err.value)
    assert str(out) in message and "not empty" in message and "'notes.txt'" in message
    assert "a new name" in message and "--force" in message and "--resume" not in message
    assert "\n" not in message
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # no marker left either


def test_a_commands_own_run_is_resumed_and_anothers_is_not(tmp_path):
    out = tmp_path / "run"
    with prepare_out(out, command="train", resumable=True):
        (out / "experiment.yaml").write_text("name: a")
    with pytest.raises(OutputError, match="--resume to continue it, or --force"):
        prepare_out(out, command="train", resumable=True)
    with prepare_out(out, command="train", resume=True, resumable=True) as run:
        assert run.resumed
    with pytest.raises(OutputError, match="holds a run of `mara train`, not of `mara live`"):
        prepare_out(out, command="live", resume=True, resumable=True)
    assert (out / "experiment.yaml").read_text() == "name: a"


def test_force_replaces_a_run_but_never_a_folder_no_run_wrote(tmp_path):
    out = tmp_path / "run"
    with prepare_out(out, command="evaluate"):
        (out / "tb").mkdir()
        (out / "tb" / "events.1").write_text("old")
        (out / "results.csv").write_text("old")
    with prepare_out(out, command="evaluate", force=True):
        assert [p.name for p in out.iterdir()] == [MARKER]
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputError, match="'thesis.tex', which no mara run wrote"):
        prepare_out(home, command="evaluate", force=True, files=("results.csv",))
    assert (home / "thesis.tex").read_text() == "years of work"
    # a run's folder from before runs were marked: only the names the command writes
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.csv").write_text("old")
    with prepare_out(old, command="evaluate", force=True, files=("results.csv",)):
        assert not (old / "results.csv").exists()


def test_a_second_run_into_the_same_folder_stops_at_once(tmp_path):
    out = tmp_path / "out"
    first = prepare_out(out, command="evaluate")
    t0 = time.monotonic()
    with pytest.raises(OutputError, match=r"another run \(mara evaluate, pid \d+\) is writing"):
        prepare_out(out, command="evaluate", force=True)
    assert time.monotonic() - t0 < 1
    # in another process too (the lock is the kernel's, released when a process dies)
    code = f"from mara_agents.outputs import prepare_out; prepare_out({str(out)!r}, command='x')"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.returncode != 0 and "is writing there now" in other.stderr
    first.release()
    with prepare_out(out, command="evaluate"):
        pass


def test_names_the_run_writes_are_checked_before_it_starts(tmp_path):
    out = tmp_path / "run"
    with prepare_out(out, command="train", resumable=True):
        (out / "summary.md").mkdir()
    with pytest.raises(OutputError, match="summary.md is a folder; the run writes a file"):
        prepare_out(out, command="train", resume=True, files=("summary.md",))
    with pytest.raises(OutputError, match="summary.md is a folder"):
        prepare_out(out, command="train", resume=True, files=("*.md",))


def test_a_failed_start_leaves_nothing(tmp_path):
    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError), prepare_out(out, command="evaluate"):
        raise RuntimeError("a check after the claim failed")
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RuntimeError), prepare_out(empty, command="evaluate"):
        raise RuntimeError("again")
    assert list(empty.iterdir()) == []


def test_an_out_that_is_a_file_is_refused(tmp_path):
    afile = tmp_path / "x"
    afile.write_text("keep")
    with pytest.raises(OutputError, match="is a file; expected a directory"):
        prepare_out(afile, command="live")
    with pytest.raises(OutputError, match="exists; choose a new name, or --force"):
        prepare_out_file(afile)
    assert prepare_out_file(afile, force=True) == afile
    with pytest.raises(OutputError, match="is a directory; expected a file path"):
        prepare_out_file(tmp_path)
    with pytest.raises(OutputError, match="--out '': empty; expected a directory"):
        prepare_out("", command="evaluate")  # not the working directory
    with pytest.raises(OutputError, match="--out ' ': empty; expected a file path"):
        prepare_out_file(" ")
    assert afile.read_text() == "keep"


def test_atomic_writes_leave_the_old_file_or_the_whole_new_one(tmp_path):
    path = tmp_path / "plot.png"
    atomic_write(path, b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"half")
        raise RuntimeError("crash mid-write")
    assert path.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [path]


# ---- each command that writes a run -----------------------------------------------------


def test_evaluate_refuses_a_finished_run_and_replaces_it_with_force(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*EVALUATE, "--out", str(out)]) == 0
    before = snapshot(out)
    assert any(name.startswith("tb/") for name in before)
    assert [p.name for p in out.glob(".*")] == [MARKER]  # written atomically: no temporaries
    refused([*EVALUATE, "--out", str(out)], capsys, f"--out {out}: not empty", "--force")
    assert snapshot(out) == before  # results.csv kept, tb/ not mixed
    assert main([*EVALUATE, "--out", str(out), "--force"]) == 0
    events = [name for name in snapshot(out) if name.startswith("tb/")]
    assert len(events) == len([n for n in before if n.startswith("tb/")])  # one run's events


def test_evaluate_while_another_run_writes_there_stops_at_once(tmp_path, capsys):
    out = tmp_path / "out"
    with prepare_out(out, command="evaluate"):
        t0 = time.monotonic()
        refused([*EVALUATE, "--out", str(out)], capsys, "another run", "is writing there now")
        assert time.monotonic() - t0 < 10
    assert [p.name for p in out.iterdir()] == [MARKER]


def test_evaluate_with_summary_md_a_folder_stops_before_any_episode(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "summary.md").mkdir(parents=True)
    refused([*EVALUATE, "--out", str(out)], capsys, "not empty", "'summary.md'")
    assert [p.name for p in out.iterdir()] == ["summary.md"]
    assert main([*EVALUATE, "--out", str(out), "--force"]) == 0  # a run's name: replaced
    assert (out / "summary.md").is_file()


def test_reproduce_refuses_a_non_empty_out_before_any_work(tmp_path, capsys):
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.md").write_text("last week's")
    err = refused(["reproduce", "--out", str(out)], capsys, f"--out {out}: not empty")
    assert "--resume" in err and "--force" in err
    assert [p.name for p in out.iterdir()] == ["summary.md"]


def test_train_refuses_a_changed_experiment_into_an_existing_run(tmp_path, capsys):
    pytest.importorskip("ray")
    run = tmp_path / "runs" / "mara_smoke"
    run.mkdir(parents=True)
    (run / "experiment.yaml").write_text("name: mara_smoke  # another experiment\n")
    (run / "tuner.pkl").write_bytes(b"tune")
    argv = ["train", str(ROOT / "experiments" / "mara_smoke.yaml"), "--out", str(run.parent)]
    err = refused(argv, capsys, f"run folder {run}: not empty", "--resume", "--force")
    assert "a new name" in err
    assert (run / "experiment.yaml").read_text() == "name: mara_smoke  # another experiment\n"
    assert sorted(p.name for p in run.iterdir()) == ["experiment.yaml", "tuner.pkl"]


def test_train_checks_rllib_batch_settings_before_writing_or_starting_ray(tmp_path, capsys):
    pytest.importorskip("ray")
    path = tmp_path / "big.yaml"
    smoke = ROOT / "experiments" / "mara_smoke.yaml"
    path.write_text(f"base: {smoke}\nrllib:\n  training:\n    minibatch_size: 100000\n")
    out = tmp_path / "runs"
    refused(["train", str(path), "--out", str(out)], capsys, "minibatch_size=100000", "200")
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_an_unreachable_address_stops_at_once_with_one_line(tmp_path, capsys, command):
    pytest.importorskip("ray")
    if command == "evaluate":
        argv = [*EVALUATE, "--out", str(tmp_path / "out")]
    else:
        argv = ["train", str(ROOT / "experiments" / "mara_smoke.yaml"), "--out", str(tmp_path)]
    t0 = time.monotonic()
    refused([*argv, "--address", "127.0.0.1:1"], capsys, "--address 127.0.0.1:1", "no answer")
    refused([*argv, "--address", "localhost"], capsys, "--address localhost", "HOST:PORT")
    assert time.monotonic() - t0 < 30
    assert list(tmp_path.iterdir()) == []


def test_live_refuses_a_non_empty_out_before_ray_starts(tmp_path, capsys):
    pytest.importorskip("ray")
    jobs = ROOT / "examples" / "live" / "small.yaml"
    out = tmp_path / "live"
    out.mkdir()
    (out / "results.csv").write_text("an earlier run")
    argv = ["live", str(jobs), "--scheduler", "uniform", "--nodes", "2", "--out", str(out)]
    t0 = time.monotonic()
    err = refused(argv, capsys, f"--out {out}: not empty", "--force")
    assert "--resume" in err and time.monotonic() - t0 < 10
    assert [p.name for p in out.iterdir()] == ["results.csv"]


def test_predictor_evaluate_refuses_a_non_empty_out(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "eval"
    out.mkdir()
    (out / "predictor_metrics.csv").write_text("last run")
    argv = ["predictor", "evaluate", "--split", "test", "--out", str(out)]
    refused(argv, capsys, f"--out {out}: not empty", "--force")
    assert (out / "predictor_metrics.csv").read_text() == "last run"
    assert sorted(p.name for p in out.iterdir()) == ["predictor_metrics.csv"]


@pytest.mark.parametrize("extra", [["--pretrain-only"], []])
def test_train_refuses_to_replace_a_warm_start_without_resume_or_force(tmp_path, capsys, extra):
    pytest.importorskip("ray")
    warm = tmp_path / "mara_pretrain.pt"
    warm.write_bytes(b"an earlier clone")
    argv = ["train", str(ROOT / "experiments" / "mara.yaml"), "--out", str(tmp_path), *extra]
    refused(argv, capsys, f"warm start {warm}: exists", "--resume", "--force")
    assert warm.read_bytes() == b"an earlier clone"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mara_pretrain.pt"]
