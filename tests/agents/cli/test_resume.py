"""``mara evaluate --resume`` continues a run only on the inputs it read: a file whose
content changed since (whatever kind, even when the options naming it are the same) is
refused in one line naming it, and nothing from two inputs is merged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from flow_predictor.deadline_prior import SHIPPED_PRIOR
from mara_agents.cli import main
from mara_env.job_logs import SHIPPED_JOBS
from mara_env.traces import SHIPPED_LIBRARY

EVALUATE = ["evaluate", "--loads", "1.0", "--episodes", "1", "--workers", "1"]
EVALUATE += ["--horizon", "10", "--no-progress"]


def _parquet(source):
    def make(path):
        shutil.copy(source, path)

    def change(path):  # the same rows, other bytes: a content hash tells them apart
        pd.read_parquet(path).to_parquet(path, compression="gzip")

    return make, change


def _text(text, added="\n# written again\n"):
    def make(path):
        path.write_text(text)

    def change(path):  # still a file of its kind, other bytes
        path.write_text(path.read_text() + added)

    return make, change


# input kind -> (file name, options naming it, make it, change it)
KINDS = {
    "jobs table": (
        "t.parquet",
        ["--jobs", "{f}", "--split", "all"],
        *_parquet(SHIPPED_JOBS["philly"]),
    ),
    "trace library": ("lib.parquet", ["--traces", "{f}"], *_parquet(SHIPPED_LIBRARY)),
    "cluster file": ("c.yaml", ["--cluster", "{f}"], *_text("reassign_cost: 0.5\n")),
    "prior file": (
        "prior.json",
        ["--schedulers", "hedge:prior={f}"],
        *_text(SHIPPED_PRIOR.read_text(), added="\n\n"),
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_resume_refuses_an_input_file_that_changed_naming_it(tmp_path, capsys, kind):
    name, options, make, change = KINDS[kind]
    path = tmp_path / name
    make(path)
    options = [o.format(f=path) for o in options]
    if "--schedulers" not in options:
        options += ["--schedulers", "uniform"]
    out = tmp_path / "out"
    argv = [*EVALUATE, *options, "--out", str(out)]
    assert main(argv) == 0
    results = (out / "results.csv").read_bytes()
    kept = path.read_bytes()
    change(path)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert KINDS[kind][1][0] in err  # the option that names it
    assert str(path) in err and "changed" in err, err
    assert (out / "results.csv").read_bytes() == results  # nothing merged, nothing lost
    path.write_bytes(kept)  # the same bytes again: resumed
    assert main([*argv, "--resume"]) == 0


def test_live_resume_refuses_a_file_the_scheduler_names_that_changed(tmp_path, capsys):
    """``mara live --resume`` records the digests in its journal's start record: a prior
    (or policy) file named by the spec that changed since is refused before Ray starts."""
    pytest.importorskip("ray")
    from mara_agents.live.jobfile import load_job_file
    from mara_agents.outputs import input_digests

    prior = tmp_path / "prior.json"
    prior.write_text(SHIPPED_PRIOR.read_text())
    jobs = Path(__file__).resolve().parents[3] / "examples" / "live" / "small.yaml"
    spec = f"hedge:prior={prior}:miss_cost=1"
    out = tmp_path / "live"
    out.mkdir()
    start = {
        "kind": "start",
        "digest": load_job_file(jobs, 10.0, 4).digest,
        "scheduler": spec,
        "nodes": 4,
        "tick_seconds": 10.0,
        "inputs": input_digests([("--scheduler", prior)]),
    }
    (out / "journal.jsonl").write_text(json.dumps(start) + "\n")
    prior.write_text(prior.read_text() + "\n")
    argv = ["live", str(jobs), "--scheduler", spec, "--nodes", "4", "--tick-seconds", "10"]
    assert main([*argv, "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--scheduler {prior} has changed" in err, err


def test_train_resume_refuses_a_trace_library_that_changed_naming_it(tmp_path):
    """``mara train --resume`` (and a resumed cloning stage) compares the experiment's
    record, which holds the digests of the files the run reads."""
    import dataclasses

    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.records import check_unchanged, write_record
    from mara_env.config import ConfigError

    make, change = _parquet(SHIPPED_LIBRARY)
    library = tmp_path / "lib.parquet"
    make(library)
    root = Path(__file__).resolve().parents[3]
    exp = load_experiment(root / "experiments" / "mara_smoke.yaml")
    exp = dataclasses.replace(exp, env=exp.env.replace(traces=str(library)))
    record = tmp_path / "run" / "experiment.yaml"
    write_record(exp, record)
    check_unchanged(exp, record)  # the same bytes: resumed
    change(library)
    with pytest.raises(ConfigError, match=rf"inputs\.env\.traces {library}"):
        check_unchanged(exp, record)


@pytest.mark.parametrize("name", ["results.partial.csv", "results.csv"])
@pytest.mark.parametrize(
    "junk", [b"", b"\x00\xffjunk", b"a,b\n1,2\n"], ids=["empty", "bytes", "other"]
)
def test_resume_names_a_kept_results_file_that_is_not_one(tmp_path, capsys, name, junk):
    out = tmp_path / "out"
    argv = [*EVALUATE, "--schedulers", "uniform", "--out", str(out)]
    assert main(argv) == 0
    (out / name).write_bytes(junk)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{out / name}: not a results table" in err, err
